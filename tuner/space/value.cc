#include "tuner/space/value.h"

#include <charconv>
#include <cmath>
#include <cstdlib>

#include "tuner/base/strings.h"

namespace ktune {

ValueType TypeOf(const Value& v) {
  switch (v.index()) {
    case 0: return ValueType::kInt;
    case 1: return ValueType::kFloat;
    case 2: return ValueType::kBool;
    default: return ValueType::kString;
  }
}

std::string PythonFloatRepr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0.0) return std::signbit(v) ? "-0.0" : "0.0";
  // Shortest round-trip digits in scientific form: "d.ddde[+-]xx".
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string sci(buf, end);
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const std::size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  const int exponent = std::atoi(sci.c_str() + e + 1);
  if (const std::size_t dot = digits.find('.'); dot != std::string::npos) {
    digits.erase(dot, 1);
  }
  // digits = d1 d2 ... dn, value = 0.d1d2...dn * 10^(exponent + 1).
  const int n = static_cast<int>(digits.size());
  if (exponent >= -4 && exponent < 16) {
    std::string out;
    if (exponent < 0) {
      out = "0." + std::string(static_cast<std::size_t>(-exponent) - 1, '0') + digits;
    } else if (exponent + 1 >= n) {
      const int zeros = exponent + 1 - n;
      out = digits + std::string(static_cast<std::size_t>(zeros), '0') + ".0";
    } else {
      const auto point = static_cast<std::size_t>(exponent) + 1;
      out = digits.substr(0, point) + "." + digits.substr(point);
    }
    return sign + out;
  }
  std::string mantissa = digits.substr(0, 1);
  if (n > 1) mantissa += "." + digits.substr(1);
  const int abs_exp = exponent < 0 ? -exponent : exponent;
  return StrCat(sign, mantissa, "e", exponent < 0 ? "-" : "+", abs_exp < 10 ? "0" : "", abs_exp);
}

std::string FormatValue(const Value& v) {
  switch (v.index()) {
    case 0: return std::to_string(std::get<std::int64_t>(v));
    case 1: return PythonFloatRepr(std::get<double>(v));
    case 2: return std::get<bool>(v) ? "True" : "False";
    default: return std::get<std::string>(v);
  }
}

Json ValueToJson(const Value& v) {
  switch (v.index()) {
    case 0: return Json(std::get<std::int64_t>(v));
    case 1: return Json(std::get<double>(v));
    case 2: return Json(std::get<bool>(v));
    default: return Json(std::get<std::string>(v));
  }
}

Scalar ToScalar(const Value& v, SymbolTable& symbols) {
  switch (v.index()) {
    case 0: return IntScalar(std::get<std::int64_t>(v));
    case 1: return FloatScalar(std::get<double>(v));
    case 2: return IntScalar(std::get<bool>(v) ? 1 : 0);
    default: return IntScalar(symbols.Intern(std::get<std::string>(v)));
  }
}

}  // namespace ktune
