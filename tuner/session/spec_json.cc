#include "tuner/session/spec_json.h"

#include <algorithm>
#include <cctype>

#include "google/protobuf/descriptor.pb.h"
#include "tuner/base/strings.h"

namespace ktune {
namespace {

namespace pb = google::protobuf;

// Edit distance in half edits: a change of case alone costs 1, any other
// substitution, insertion or deletion 2.
int HalfEdits(std::string_view a, std::string_view b) {
  std::vector<int> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = static_cast<int>(2 * j);
  for (std::size_t i = 1; i <= a.size(); ++i) {
    int diagonal = row[0];
    row[0] = static_cast<int>(2 * i);
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const char x = a[i - 1], y = b[j - 1];
      const int swap = x == y ? 0
                       : std::tolower(static_cast<unsigned char>(x)) ==
                               std::tolower(static_cast<unsigned char>(y))
                           ? 1
                           : 2;
      const int next = std::min({row[j] + 2, row[j - 1] + 2, diagonal + swap});
      diagonal = row[j];
      row[j] = next;
    }
  }
  return row[b.size()];
}

const pb::FieldDescriptor* FindField(const pb::Descriptor& type, const std::string& name) {
  if (const pb::FieldDescriptor* f = type.FindFieldByName(name)) return f;
  for (int i = 0; i < type.field_count(); ++i) {
    if (type.field(i)->json_name() == name) return type.field(i);
  }
  return nullptr;
}

std::string UnknownField(const std::string& path, const std::string& name,
                         const pb::Descriptor& type) {
  std::vector<std::string> names;
  for (int i = 0; i < type.field_count(); ++i) {
    names.push_back(type.field(i)->json_name());
    if (type.field(i)->name() != type.field(i)->json_name()) names.push_back(type.field(i)->name());
  }
  std::string out = StrCat(path.empty() ? name : StrCat(path, ".", name),
                           ": no field of that name in ", type.name());
  if (std::optional<std::string> near = ClosestName(name, names)) {
    return StrCat(out, "; did you mean ", *near, "?");
  }
  std::vector<std::string> fields;
  fields.reserve(static_cast<std::size_t>(type.field_count()));
  for (int i = 0; i < type.field_count(); ++i) fields.push_back(type.field(i)->json_name());
  return StrCat(out, " (its fields: ", StrJoin(fields, ", "), ")");
}

std::optional<std::string> CheckEnum(const std::string& path, const Json& value,
                                     const pb::EnumDescriptor& type) {
  if (!value.is_string() || type.FindValueByName(value.as_string()) != nullptr) return std::nullopt;
  std::vector<std::string> names;
  for (int i = 0; i < type.value_count(); ++i) {
    const std::string& n = type.value(i)->name();
    constexpr std::string_view kUnspecified = "_UNSPECIFIED";
    const bool unspecified =
        n.size() >= kUnspecified.size() &&
        n.compare(n.size() - kUnspecified.size(), kUnspecified.size(), kUnspecified) == 0;
    if (!unspecified) names.push_back(n);
  }
  std::string out =
      StrCat(path, ": \"", value.as_string(), "\" is not one of ", StrJoin(names, ", "));
  if (std::optional<std::string> near = ClosestName(value.as_string(), names)) {
    out += StrCat("; did you mean ", *near, "?");
  }
  return out;
}

std::optional<std::string> CheckMessage(const std::string& path, const Json& doc,
                                        const pb::Descriptor& type);

// One value of `field` (an element, for a repeated field).
std::optional<std::string> CheckValue(const std::string& path, const Json& value,
                                      const pb::FieldDescriptor& field) {
  if (field.enum_type() != nullptr) return CheckEnum(path, value, *field.enum_type());
  const pb::Descriptor* message = field.message_type();
  // Well-known types (Duration, Struct, ...) have JSON forms of their own.
  if (message == nullptr || message->file()->package() == "google.protobuf") return std::nullopt;
  if (message->options().map_entry()) {
    if (!value.is_object()) return std::nullopt;
    const pb::FieldDescriptor* mapped = message->map_value();
    for (const auto& [key, v] : value.as_object()) {
      if (auto e = CheckValue(StrCat(path, "[\"", key, "\"]"), v, *mapped)) return e;
    }
    return std::nullopt;
  }
  return CheckMessage(path, value, *message);
}

std::optional<std::string> CheckMessage(const std::string& path, const Json& doc,
                                        const pb::Descriptor& type) {
  if (!doc.is_object()) return std::nullopt;
  for (const auto& [name, value] : doc.as_object()) {
    const pb::FieldDescriptor* field = FindField(type, name);
    if (field == nullptr) return UnknownField(path, name, type);
    const std::string here = path.empty() ? name : StrCat(path, ".", name);
    if (field->is_repeated() && !field->is_map()) {
      if (!value.is_array()) continue;
      const Json::Array& items = value.as_array();
      for (std::size_t i = 0; i < items.size(); ++i) {
        if (auto e = CheckValue(StrCat(here, "[", i, "]"), items[i], *field)) return e;
      }
    } else if (auto e = CheckValue(here, value, *field)) {
      return e;
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> ClosestName(std::string_view word,
                                       const std::vector<std::string>& candidates) {
  const int limit = 2 * std::clamp(static_cast<int>(word.size()) / 3, 1, 3);
  std::optional<std::string> best;
  int best_cost = limit + 1;
  for (const std::string& c : candidates) {
    const int cost = HalfEdits(word, c);
    if (cost < best_cost) {
      best_cost = cost;
      best = c;
    }
  }
  return best;
}

std::optional<std::string> ExplainJsonMismatch(const Json& doc, const pb::Descriptor& type) {
  return CheckMessage("", doc, type);
}

}  // namespace ktune
