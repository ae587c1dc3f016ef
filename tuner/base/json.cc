#include "tuner/base/json.h"

#include <charconv>
#include <cmath>
#include <cstring>
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

// Recursive-descent parser over a string_view. Nesting is bounded so that a
// hostile document cannot exhaust the stack.
class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  absl::StatusOr<Json> ParseDocument() {
    SkipSpace();
    Json value;
    if (!ParseValue(value, 0)) return Error();
    SkipSpace();
    if (pos_ != text_.size()) {
      Fail("unexpected text after the JSON value");
      return Error();
    }
    return value;
  }

 private:
  static constexpr int kMaxDepth = 256;

  bool Fail(std::string what) {
    if (error_.empty()) {
      error_ = std::move(what);
      error_pos_ = pos_;
    }
    return false;
  }

  absl::Status Error() const {
    std::size_t line = 1, column = 1;
    for (std::size_t i = 0; i < error_pos_ && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    return absl::InvalidArgumentError(StrCat("line ", line, ", column ", column, ": ", error_));
  }

  void SkipSpace() {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
      ++pos_;
    }
  }

  bool Consume(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  bool ParseValue(Json& out, int depth) {
    if (depth > kMaxDepth) return Fail("nesting deeper than 256 levels");
    if (pos_ >= text_.size()) return Fail("unexpected end of input");
    const char c = text_[pos_];
    switch (c) {
      case '{': return ParseObject(out, depth);
      case '[': return ParseArray(out, depth);
      case '"': {
        std::string s;
        if (!ParseString(s)) return false;
        out = Json(std::move(s));
        return true;
      }
      case 't':
        if (Consume("true")) {
          out = Json(true);
          return true;
        }
        break;
      case 'f':
        if (Consume("false")) {
          out = Json(false);
          return true;
        }
        break;
      case 'n':
        if (Consume("null")) {
          out = Json();
          return true;
        }
        break;
      default:
        if (c == '-' || (c >= '0' && c <= '9')) return ParseNumber(out);
    }
    return Fail(StrCat("unexpected character '", std::string(1, c), "'"));
  }

  bool ParseObject(Json& out, int depth) {
    ++pos_;  // '{'
    Json::Object members;
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == '}') {
      ++pos_;
      out = Json(std::move(members));
      return true;
    }
    while (true) {
      SkipSpace();
      if (pos_ >= text_.size() || text_[pos_] != '"') {
        return Fail(pos_ >= text_.size() ? "unexpected end of input"
                                         : "expected a member name in quotes");
      }
      std::string name;
      if (!ParseString(name)) return false;
      SkipSpace();
      if (pos_ >= text_.size() || text_[pos_] != ':') {
        return Fail("expected ':' after a member name");
      }
      ++pos_;
      SkipSpace();
      Json value;
      if (!ParseValue(value, depth + 1)) return false;
      members.emplace_back(std::move(name), std::move(value));
      SkipSpace();
      if (pos_ >= text_.size()) return Fail("unexpected end of input");
      if (text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (text_[pos_] == '}') {
        ++pos_;
        out = Json(std::move(members));
        return true;
      }
      return Fail("expected ',' or '}' in an object");
    }
  }

  bool ParseArray(Json& out, int depth) {
    ++pos_;  // '['
    Json::Array items;
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == ']') {
      ++pos_;
      out = Json(std::move(items));
      return true;
    }
    while (true) {
      SkipSpace();
      Json value;
      if (!ParseValue(value, depth + 1)) return false;
      items.push_back(std::move(value));
      SkipSpace();
      if (pos_ >= text_.size()) return Fail("unexpected end of input");
      if (text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (text_[pos_] == ']') {
        ++pos_;
        out = Json(std::move(items));
        return true;
      }
      return Fail("expected ',' or ']' in an array");
    }
  }

  static void AppendUtf8(std::string& s, std::uint32_t cp) {
    if (cp < 0x80) {
      s.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      s.push_back(static_cast<char>(0xE0 | (cp >> 12)));
      s.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      s.push_back(static_cast<char>(0xF0 | (cp >> 18)));
      s.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      s.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  bool ParseHex4(std::uint32_t& v) {
    if (pos_ + 4 > text_.size()) return Fail("truncated \\u escape");
    v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = text_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9')
        v |= static_cast<std::uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f')
        v |= static_cast<std::uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        v |= static_cast<std::uint32_t>(c - 'A' + 10);
      else
        return Fail("bad hex digit in \\u escape");
    }
    return true;
  }

  bool ParseString(std::string& s) {
    ++pos_;  // opening quote
    while (true) {
      // Copy the run of plain characters in one go.
      const std::size_t start = pos_;
      while (pos_ < text_.size() && text_[pos_] != '"' && text_[pos_] != '\\' &&
             static_cast<unsigned char>(text_[pos_]) >= 0x20) {
        ++pos_;
      }
      s.append(text_.data() + start, pos_ - start);
      if (pos_ >= text_.size()) return Fail("unterminated string");
      const char c = text_[pos_];
      if (c == '"') {
        ++pos_;
        return true;
      }
      if (c != '\\') return Fail("control character in a string");
      ++pos_;
      if (pos_ >= text_.size()) return Fail("unterminated string");
      const char e = text_[pos_++];
      switch (e) {
        case '"': s.push_back('"'); break;
        case '\\': s.push_back('\\'); break;
        case '/': s.push_back('/'); break;
        case 'b': s.push_back('\b'); break;
        case 'f': s.push_back('\f'); break;
        case 'n': s.push_back('\n'); break;
        case 'r': s.push_back('\r'); break;
        case 't': s.push_back('\t'); break;
        case 'u': {
          std::uint32_t cp;
          if (!ParseHex4(cp)) return false;
          if (cp >= 0xD800 && cp < 0xDC00) {
            std::uint32_t low;
            if (!Consume("\\u") || !ParseHex4(low) || low < 0xDC00 || low >= 0xE000) {
              return Fail("unpaired surrogate in \\u escape");
            }
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          } else if (cp >= 0xDC00 && cp < 0xE000) {
            return Fail("unpaired surrogate in \\u escape");
          }
          AppendUtf8(s, cp);
          break;
        }
        default: --pos_; return Fail("bad escape in a string");
      }
    }
  }

  bool ParseNumber(Json& out) {
    const std::size_t start = pos_;
    if (text_[pos_] == '-') ++pos_;
    if (pos_ >= text_.size() || text_[pos_] < '0' || text_[pos_] > '9') {
      return Fail("bad number");
    }
    if (text_[pos_] == '0') {
      ++pos_;
    } else {
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
    }
    bool integral = true;
    if (pos_ < text_.size() && text_[pos_] == '.') {
      integral = false;
      ++pos_;
      if (pos_ >= text_.size() || text_[pos_] < '0' || text_[pos_] > '9') {
        return Fail("bad number: digits expected after '.'");
      }
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      integral = false;
      ++pos_;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
      if (pos_ >= text_.size() || text_[pos_] < '0' || text_[pos_] > '9') {
        return Fail("bad number: digits expected in the exponent");
      }
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
    }
    const char* first = text_.data() + start;
    const char* last = text_.data() + pos_;
    if (integral) {
      std::int64_t v;
      auto [ptr, ec] = std::from_chars(first, last, v);
      if (ec == std::errc() && ptr == last) {
        out = Json(v);
        return true;
      }
      // Too large for int64: fall through to double.
    }
    double d;
    auto [ptr, ec] = std::from_chars(first, last, d);
    if (ptr != last || ec != std::errc()) {
      pos_ = start;
      return Fail(ec == std::errc::result_out_of_range ? "number out of range" : "bad number");
    }
    out = Json(d);
    return true;
  }

  std::string_view text_;
  std::size_t pos_ = 0;
  std::string error_;
  std::size_t error_pos_ = 0;
};

}  // namespace

absl::StatusOr<Json> ParseJson(std::string_view text) { return Parser(text).ParseDocument(); }

}  // namespace ktune
