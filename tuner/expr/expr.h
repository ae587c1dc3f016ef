// ktune's expression language: one small, statically typed language for
// constraints, launch geometry, argument sizes and derived objectives.
//
//   block_size_x * block_size_y <= 1024
//   ceil_div(N, block_size_x * tile)
//   2.0 * M * N * K / time_s / 1e12
//
// Values are int (64-bit), float (double), bool or string. Integer
// arithmetic stays integer: `/` and `%` on two ints truncate as in C++, `//`
// floors; anything with a float is float. Comparisons chain as in Python
// (`32 <= a * b <= 1024`), `and`/`or`/`not` and `&&`/`||`/`!` both work, and
// so does `c ? a : b` and Python's `a if c else b`. Operator precedence is
// Python's. Built-ins: ceil_div, min, max, abs, floor, ceil, round, int,
// float, sqrt, log2, log, exp, pow.
//
// An expression is compiled once against a SymbolTable (which names exist,
// their types and where their values live), type-checked, constant-folded,
// and then evaluated many times over an array of slots. Errors carry the
// position and are shown with a caret under it.
#ifndef KTUNE_TUNER_EXPR_EXPR_H_
#define KTUNE_TUNER_EXPR_EXPR_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace ktune {

enum class ValueType : std::uint8_t { kInt, kFloat, kBool, kString };

// "int", "float", "bool", "string".
const char* ValueTypeName(ValueType type);

// An untagged value; its type is known from context. bool is stored in `i`
// as 0 or 1, a string as its id in the SymbolTable (`i`).
union Scalar {
  std::int64_t i;
  double f;
};

inline Scalar IntScalar(std::int64_t v) {
  Scalar s;
  s.i = v;
  return s;
}
inline Scalar FloatScalar(double v) {
  Scalar s;
  s.f = v;
  return s;
}

// The names an expression may read. A name is either bound to a slot (its
// value is supplied at evaluation time) or a constant (folded at compile
// time). Strings are interned: equal strings have equal ids, so string
// comparison is integer comparison.
//
// Not thread-safe for mutation; compiling interns string literals, so
// compile expressions that share a table from one thread.
class SymbolTable {
 public:
  struct Symbol {
    ValueType type;
    int slot;         // -1 for constants
    Scalar constant;  // when slot == -1
  };

  // Adds `name` bound to evaluation slot `slot` (>= 0). Errors:
  // INVALID_ARGUMENT if the name is taken, not an identifier, or a keyword.
  absl::Status AddSlot(std::string_view name, ValueType type, int slot);
  // Adds a named constant.
  absl::Status AddConstant(std::string_view name, ValueType type, Scalar value);

  // Returns the symbol, or nullptr.
  const Symbol* Find(std::string_view name) const;

  // Id of `s`, allocated on first use.
  std::int64_t Intern(std::string_view s);
  // REQUIRES: id was returned by Intern.
  const std::string& StringOf(std::int64_t id) const { return strings_[id]; }

  // True if `name` is a valid identifier and not a keyword.
  static bool IsIdentifier(std::string_view name);

 private:
  absl::Status CheckNew(std::string_view name) const;

  std::map<std::string, Symbol, std::less<>> symbols_;
  std::map<std::string, std::int64_t, std::less<>> string_ids_;
  std::vector<std::string> strings_;
};

// Why an evaluation failed.
enum class EvalErrorKind : std::uint8_t {
  kNone,
  kDivisionByZero,
  kOverflow,
  kNegativeExponent,
  kDomain,  // e.g. int() of NaN
};

struct EvalError {
  EvalErrorKind kind = EvalErrorKind::kNone;
  int position = 0;  // offset in the expression text
};

// Limits on an expression's text: its length, and how deeply it nests
// (parentheses, calls, operators, each link of a chain `a + b + c`).
inline constexpr std::size_t kMaxExpressionChars = 10000;
inline constexpr int kMaxExpressionDepth = 200;

// A compiled expression. Immutable after Compile; Evaluate may be called
// from many threads at once. Cheap to move, copyable.
class Expr {
 public:
  // Compiles `text` against `symbols`. Errors are INVALID_ARGUMENT with a
  // message of the form "<what> at column C\n  <text>\n  <caret>".
  static absl::StatusOr<Expr> Compile(std::string_view text, SymbolTable& symbols);

  // Compiles and checks that the result has type `want` (kBool also accepts
  // numbers, tested against zero; kFloat also accepts int).
  static absl::StatusOr<Expr> CompileAs(std::string_view text, SymbolTable& symbols,
                                        ValueType want);

  Expr(const Expr&) = default;
  Expr& operator=(const Expr&) = default;
  Expr(Expr&&) noexcept = default;
  Expr& operator=(Expr&&) noexcept = default;

  ValueType type() const { return type_; }
  const std::string& text() const { return text_; }
  // The distinct slots the expression reads, ascending.
  const std::vector<int>& slots() const { return slots_; }
  // True if it reads no slot (it was folded to a constant).
  bool is_constant() const { return slots_.empty(); }

  // Evaluates over `slots` (indexed by slot number; only slots() are read).
  // Returns false and fills `error` (if given) on a run-time error.
  bool Evaluate(const Scalar* slots, Scalar* out, EvalError* error = nullptr) const;

  // Typed helpers: the value converted to the requested type (bool: nonzero;
  // double: ints widened). Same failure contract as Evaluate.
  bool EvaluateBool(const Scalar* slots, bool* out, EvalError* error = nullptr) const;
  bool EvaluateInt(const Scalar* slots, std::int64_t* out, EvalError* error = nullptr) const;
  bool EvaluateDouble(const Scalar* slots, double* out, EvalError* error = nullptr) const;

  // A readable message for `error`, with the caret under its position.
  std::string Describe(const EvalError& error) const;

  // Opcodes; public only so the implementation's helpers can name them.
  enum class Op : std::uint8_t;
  struct Instruction;

 private:
  Expr() = default;

  std::string text_;
  ValueType type_ = ValueType::kInt;
  std::vector<int> slots_;
  std::shared_ptr<const std::vector<Instruction>> code_;
  int max_stack_ = 0;
};

// Formats `message` with `text` below it and a caret (with `length` tildes)
// under column `position`: the house style for expression errors.
std::string CaretMessage(std::string_view message, std::string_view text, int position,
                         int length = 1);

}  // namespace ktune

#endif  // KTUNE_TUNER_EXPR_EXPR_H_
