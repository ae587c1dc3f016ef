// A small JSON document model, parsed by nlohmann/json (errors with line
// and column), and a writer with shortest round-trip numbers.
//
// Used for files in other tools' formats (recorded tuning caches) and for
// the command line's --json output. Job files are not parsed here: they are
// protobuf JSON (one schema).
#ifndef KTUNE_TUNER_BASE_JSON_H_
#define KTUNE_TUNER_BASE_JSON_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"

namespace ktune {

// A JSON value. Objects keep their members in document order (duplicate
// names are kept too; Find returns the first). Integers without fraction or
// exponent that fit in int64 are kept as integers, other numbers as doubles.
// Value type; not thread-safe for concurrent mutation.
class Json {
 public:
  using Array = std::vector<Json>;
  using Member = std::pair<std::string, Json>;
  using Object = std::vector<Member>;

  enum class Type { kNull, kBool, kInt, kDouble, kString, kArray, kObject };

  // Implicit on purpose: Json(1), Json("x") and Json(true) build documents
  // the way JSON literals read.
  // NOLINTBEGIN(google-explicit-constructor)
  Json() = default;
  Json(std::nullptr_t) {}
  Json(bool b) : value_(b) {}
  Json(int v) : value_(static_cast<std::int64_t>(v)) {}
  Json(std::int64_t v) : value_(v) {}
  Json(double v) : value_(v) {}
  Json(std::string s) : value_(std::move(s)) {}
  Json(std::string_view s) : value_(std::string(s)) {}
  Json(const char* s) : value_(std::string(s)) {}
  Json(Array a) : value_(std::move(a)) {}
  Json(Object o) : value_(std::move(o)) {}
  // NOLINTEND(google-explicit-constructor)

  static Json MakeObject() { return Json(Object{}); }
  static Json MakeArray() { return Json(Array{}); }

  Type type() const { return static_cast<Type>(value_.index()); }
  bool is_null() const { return type() == Type::kNull; }
  bool is_bool() const { return type() == Type::kBool; }
  bool is_int() const { return type() == Type::kInt; }
  bool is_number() const { return type() == Type::kInt || type() == Type::kDouble; }
  bool is_string() const { return type() == Type::kString; }
  bool is_array() const { return type() == Type::kArray; }
  bool is_object() const { return type() == Type::kObject; }

  // REQUIRES: the matching type (is_bool() for as_bool() and so on;
  // as_double() accepts both number types).
  bool as_bool() const { return std::get<bool>(value_); }
  std::int64_t as_int() const { return std::get<std::int64_t>(value_); }
  double as_double() const;
  const std::string& as_string() const { return std::get<std::string>(value_); }
  const Array& as_array() const { return std::get<Array>(value_); }
  Array& as_array() { return std::get<Array>(value_); }
  const Object& as_object() const { return std::get<Object>(value_); }
  Object& as_object() { return std::get<Object>(value_); }

  // The first member named `name`, or nullptr. REQUIRES: is_object().
  const Json* Find(std::string_view name) const;

  // Appends a member. REQUIRES: is_object().
  Json& Set(std::string name, Json value);
  // Appends an element. REQUIRES: is_array().
  Json& Push(Json value);

  // Serialises. indent < 0: compact on one line; otherwise pretty-printed
  // with that many spaces. Non-finite doubles are written as null.
  std::string Dump(int indent = -1) const;

  // "null", "bool", "integer", "number", "string", "array", "object".
  static const char* TypeName(Type type);

 private:
  void DumpTo(std::string& out, int indent, int depth) const;

  std::variant<std::monostate, bool, std::int64_t, double, std::string, Array, Object> value_;
};

// Parses one JSON document (RFC 8259; surrounding whitespace allowed).
// Errors are INVALID_ARGUMENT and say "line L, column C: ...".
absl::StatusOr<Json> ParseJson(std::string_view text);

// Appends `s` to `out` as a quoted JSON string.
void AppendJsonString(std::string& out, std::string_view s);

// Shortest text that reads back as exactly `v` (std::to_chars).
std::string FormatDouble(double v);

}  // namespace ktune

#endif  // KTUNE_TUNER_BASE_JSON_H_
