// Parameter values and their canonical text.
#ifndef KTUNE_TUNER_SPACE_VALUE_H_
#define KTUNE_TUNER_SPACE_VALUE_H_

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "tuner/base/json.h"
#include "tuner/expr/expr.h"

namespace ktune {

// One value of a tunable parameter.
using Value = std::variant<std::int64_t, double, bool, std::string>;

ValueType TypeOf(const Value& v);

// The value as it appears in a canonical configuration key: Python's str(),
// as Kernel Tuner writes cache keys: 128, 1.0, 1e-05, True, text.
std::string FormatValue(const Value& v);

// Python's repr() of a float: shortest round-trip digits, fixed notation
// for 1e-4 <= |v| < 1e16 (always with a fractional part, "2.0"), otherwise
// scientific with a two-digit exponent ("1e-05", "1.5e+16"), "inf", "nan".
std::string PythonFloatRepr(double v);

Json ValueToJson(const Value& v);

// The value as an expression Scalar (bool as 0/1; a string as its id in
// `symbols`, interned on first use).
Scalar ToScalar(const Value& v, SymbolTable& symbols);

// A tunable parameter: a name and its distinct values, all of one type.
struct Parameter {
  std::string name;
  ValueType type = ValueType::kInt;
  std::vector<Value> values;
};

}  // namespace ktune

#endif  // KTUNE_TUNER_SPACE_VALUE_H_
