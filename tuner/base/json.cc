#include "tuner/base/json.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <system_error>

#include "absl/status/status.h"
#include "tuner/base/strings.h"

namespace ktune {

double Json::as_double() const {
  if (const auto* i = std::get_if<std::int64_t>(&value_)) {
    return static_cast<double>(*i);
  }
  return std::get<double>(value_);
}

const Json* Json::Find(std::string_view name) const {
  for (const Member& m : as_object()) {
    if (m.first == name) return &m.second;
  }
  return nullptr;
}

Json& Json::Set(std::string name, Json value) {
  Object& o = as_object();
  o.emplace_back(std::move(name), std::move(value));
  return o.back().second;
}

Json& Json::Push(Json value) {
  Array& a = as_array();
  a.push_back(std::move(value));
  return a.back();
}

const char* Json::TypeName(Type type) {
  switch (type) {
    case Type::kNull: return "null";
    case Type::kBool: return "bool";
    case Type::kInt: return "integer";
    case Type::kDouble: return "number";
    case Type::kString: return "string";
    case Type::kArray: return "array";
    case Type::kObject: return "object";
  }
  return "?";
}

std::string FormatDouble(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  if (ec != std::errc()) return "0";
  return std::string(buf, end);
}

void AppendJsonString(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.push_back('"');
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (u < 0x20) {
          out += "\\u00";
          out.push_back(kHex[u >> 4]);
          out.push_back(kHex[u & 15]);
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
}

std::string Json::Dump(int indent) const {
  std::string out;
  DumpTo(out, indent, 0);
  return out;
}

namespace {

void NewLine(std::string& out, int indent, int depth) {
  if (indent < 0) return;
  out.push_back('\n');
  out.append(static_cast<std::size_t>(indent) * static_cast<std::size_t>(depth), ' ');
}

}  // namespace

void Json::DumpTo(std::string& out, int indent, int depth) const {
  switch (type()) {
    case Type::kNull: out += "null"; break;
    case Type::kBool: out += as_bool() ? "true" : "false"; break;
    case Type::kInt: out += std::to_string(as_int()); break;
    case Type::kDouble: {
      const double d = std::get<double>(value_);
      out += std::isfinite(d) ? FormatDouble(d) : "null";
      break;
    }
    case Type::kString: AppendJsonString(out, as_string()); break;
    case Type::kArray: {
      const Array& a = as_array();
      out.push_back('[');
      for (std::size_t i = 0; i < a.size(); ++i) {
        if (i > 0) out.push_back(',');
        NewLine(out, indent, depth + 1);
        a[i].DumpTo(out, indent, depth + 1);
      }
      if (!a.empty()) NewLine(out, indent, depth);
      out.push_back(']');
      break;
    }
    case Type::kObject: {
      const Object& o = as_object();
      out.push_back('{');
      for (std::size_t i = 0; i < o.size(); ++i) {
        if (i > 0) out.push_back(',');
        NewLine(out, indent, depth + 1);
        AppendJsonString(out, o[i].first);
        out += indent < 0 ? ":" : ": ";
        o[i].second.DumpTo(out, indent, depth + 1);
      }
      if (!o.empty()) NewLine(out, indent, depth);
      out.push_back('}');
      break;
    }
  }
}

namespace {

constexpr int kMaxDepth = 256;

// Builds a Json from nlohmann's SAX events (its parser, tested and fuzzed
// far beyond what a parser of our own would be): members in document
// order, duplicates kept, integers as int64 where they fit. Containers
// under construction are on an explicit stack, bounded at kMaxDepth.
class Builder {
 public:
  using Sax = nlohmann::json_sax<nlohmann::json>;

  bool null() { return Value(Json()); }
  bool boolean(bool b) { return Value(Json(b)); }
  bool number_integer(Sax::number_integer_t v) { return Value(Json(static_cast<std::int64_t>(v))); }
  bool number_unsigned(Sax::number_unsigned_t v) {
    // Beyond int64: a double, as for integers too large for any type.
    if (v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      return Value(Json(static_cast<double>(v)));
    }
    return Value(Json(static_cast<std::int64_t>(v)));
  }
  bool number_float(Sax::number_float_t v, const Sax::string_t& /*text*/) { return Value(Json(v)); }
  bool string(Sax::string_t& s) { return Value(Json(std::move(s))); }
  bool binary(Sax::binary_t& /*bytes*/) { return false; }  // not produced by JSON text
  bool start_object(std::size_t /*size*/) { return Open(Json::MakeObject()); }
  bool key(Sax::string_t& name) {
    keys_.back() = std::move(name);
    return true;
  }
  bool end_object() { return Close(); }
  bool start_array(std::size_t /*size*/) { return Open(Json::MakeArray()); }
  bool end_array() { return Close(); }
  bool parse_error(std::size_t byte, const std::string& /*token*/,
                   const nlohmann::detail::exception& e) {
    error_ = e.what();
    error_byte_ = byte;
    return false;
  }

  bool too_deep() const { return too_deep_; }
  const std::string& error() const { return error_; }
  // Bytes read when the error was found (its last character is the
  // offending one).
  std::size_t error_byte() const { return error_byte_; }
  Json& root() { return root_; }

 private:
  bool Value(Json v) {
    if (open_.empty()) {
      root_ = std::move(v);
    } else if (open_.back().is_array()) {
      open_.back().Push(std::move(v));
    } else {
      open_.back().Set(std::move(keys_.back()), std::move(v));
    }
    return true;
  }
  bool Open(Json container) {
    if (open_.size() >= kMaxDepth) {
      too_deep_ = true;
      return false;
    }
    open_.push_back(std::move(container));
    keys_.emplace_back();
    return true;
  }
  bool Close() {
    Json done = std::move(open_.back());
    open_.pop_back();
    keys_.pop_back();
    return Value(std::move(done));
  }

  std::vector<Json> open_;
  std::vector<std::string> keys_;  // the member name pending in each open object
  Json root_;
  std::string error_;
  std::size_t error_byte_ = 0;
  bool too_deep_ = false;
};

// Line and column (from 1) of byte `pos` of `text`.
std::string Where(std::string_view text, std::size_t pos) {
  std::size_t line = 1, column = 1;
  for (std::size_t i = 0; i < pos && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return StrCat("line ", line, ", column ", column);
}

// Where the nesting first goes past kMaxDepth (the SAX events carry no
// position): the bracket that opens level kMaxDepth + 1, strings skipped.
std::size_t TooDeepAt(std::string_view text) {
  int depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxDepth) return i;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return text.size();
}

// "line L, column C: what went wrong" from nlohmann's message: its
// "[json.exception.K.N] " tag dropped, its "parse error at line L, column
// C: " kept as ours; messages without a position (a number out of range)
// get that of the last byte read.
std::string Describe(std::string_view text, std::string what, std::size_t byte) {
  if (what.rfind("[json.exception.", 0) == 0) {
    const std::size_t tag_end = what.find("] ");
    if (tag_end != std::string::npos) what.erase(0, tag_end + 2);
  }
  constexpr std::string_view kPrefix = "parse error at ";
  if (what.rfind(kPrefix, 0) == 0) return what.substr(kPrefix.size());
  return StrCat(Where(text, byte > 0 ? byte - 1 : 0), ": ", what);
}

}  // namespace

absl::StatusOr<Json> ParseJson(std::string_view text) {
  Builder builder;
  if (nlohmann::json::sax_parse(text.begin(), text.end(), &builder)) {
    return std::move(builder.root());
  }
  if (builder.too_deep()) {
    return absl::InvalidArgumentError(
        StrCat(Where(text, TooDeepAt(text)), ": nesting deeper than ", kMaxDepth, " levels"));
  }
  return absl::InvalidArgumentError(Describe(text, builder.error(), builder.error_byte()));
}

}  // namespace ktune
