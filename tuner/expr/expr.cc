#include "tuner/expr/expr.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "tuner/base/strings.h"
#include "tuner/expr/expr_internal.h"

namespace ktune {

using expr_internal::Generate;
using expr_internal::Generated;
using expr_internal::IsIdentChar;
using expr_internal::IsIdentStart;
using expr_internal::IsNumeric;
using expr_internal::NodePtr;
using expr_internal::Op;
using expr_internal::Parse;
using expr_internal::Run;

const char* ValueTypeName(ValueType type) {
  switch (type) {
    case ValueType::kInt: return "int";
    case ValueType::kFloat: return "float";
    case ValueType::kBool: return "bool";
    case ValueType::kString: return "string";
  }
  return "?";
}

namespace {

constexpr std::string_view kKeywords[] = {"and",  "or",    "not",  "if",   "else",
                                          "true", "false", "True", "False"};

bool IsKeyword(std::string_view s) {
  return std::find(std::begin(kKeywords), std::end(kKeywords), s) != std::end(kKeywords);
}

}  // namespace

std::string CaretMessage(std::string_view message, std::string_view text, int position,
                         int length) {
  std::string shown(text);
  for (char& c : shown) {
    if (c == '\n' || c == '\t' || c == '\r') c = ' ';
  }
  position = std::clamp(position, 0, static_cast<int>(shown.size()));
  length = std::max(1, std::min(length, static_cast<int>(shown.size()) - position));
  std::string caret(static_cast<std::size_t>(position), ' ');
  caret.push_back('^');
  caret.append(static_cast<std::size_t>(length - 1), '~');
  return StrCat(message, " at column ", position + 1, "\n  ", shown, "\n  ", caret);
}

// ---------------------------------------------------------------- symbols

bool SymbolTable::IsIdentifier(std::string_view name) {
  if (name.empty() || !IsIdentStart(name[0])) return false;
  for (char c : name) {
    if (!IsIdentChar(c)) return false;
  }
  return !IsKeyword(name);
}

absl::Status SymbolTable::CheckNew(std::string_view name) const {
  if (!IsIdentifier(name)) {
    return absl::InvalidArgumentError(StrCat("'", name,
                                             "' is not a valid name (letters, digits and _, not "
                                             "starting with a digit, not a keyword)"));
  }
  if (symbols_.find(name) != symbols_.end()) {
    return absl::InvalidArgumentError(StrCat("the name '", name, "' is defined twice"));
  }
  return absl::OkStatus();
}

absl::Status SymbolTable::AddSlot(std::string_view name, ValueType type, int slot) {
  if (auto s = CheckNew(name); !s.ok()) return s;
  symbols_.emplace(std::string(name), Symbol{type, slot, IntScalar(0)});
  return absl::OkStatus();
}

absl::Status SymbolTable::AddConstant(std::string_view name, ValueType type, Scalar value) {
  if (auto s = CheckNew(name); !s.ok()) return s;
  symbols_.emplace(std::string(name), Symbol{type, -1, value});
  return absl::OkStatus();
}

const SymbolTable::Symbol* SymbolTable::Find(std::string_view name) const {
  auto it = symbols_.find(name);
  return it == symbols_.end() ? nullptr : &it->second;
}

std::int64_t SymbolTable::Intern(std::string_view s) {
  auto it = string_ids_.find(s);
  if (it != string_ids_.end()) return it->second;
  const auto id = static_cast<std::int64_t>(strings_.size());
  strings_.emplace_back(s);
  string_ids_.emplace(std::string(s), id);
  return id;
}

// ---------------------------------------------------------------- Expr

absl::StatusOr<Expr> Expr::Compile(std::string_view text, SymbolTable& symbols) {
  absl::StatusOr<NodePtr> root = Parse(text, symbols);
  if (!root.ok()) return root.status();
  Generated gen = Generate(**root);
  Expr e;
  e.text_ = std::string(text);
  e.type_ = (*root)->type;
  e.slots_.assign(gen.slots.begin(), gen.slots.end());
  e.max_stack_ = std::max(1, gen.max_depth);
  if (e.slots_.empty()) {
    // Fold to a constant now; an error here is an error in the text.
    Scalar value;
    EvalError error;
    if (!Run(gen.code, e.max_stack_, nullptr, &value, &error)) {
      e.code_ = std::make_shared<std::vector<Instruction>>(std::move(gen.code));
      return absl::InvalidArgumentError(e.Describe(error));
    }
    gen.code.assign(1, Instruction{Op::kPush, 0, 0, value});
    e.max_stack_ = 1;
  }
  e.code_ = std::make_shared<const std::vector<Instruction>>(std::move(gen.code));
  return e;
}

absl::StatusOr<Expr> Expr::CompileAs(std::string_view text, SymbolTable& symbols, ValueType want) {
  absl::StatusOr<Expr> e = Compile(text, symbols);
  if (!e.ok()) return e;
  const ValueType got = e->type();
  bool fits = got == want;
  if (want == ValueType::kBool) fits = got != ValueType::kString;
  if (want == ValueType::kFloat) fits = IsNumeric(got);
  if (want == ValueType::kInt) fits = got == ValueType::kInt || got == ValueType::kBool;
  if (!fits) {
    std::string hint;
    if (want == ValueType::kInt && got == ValueType::kFloat) {
      hint = "; use floor(), ceil(), round() or int()";
    }
    return absl::InvalidArgumentError(
        CaretMessage(StrCat("expected ", want == ValueType::kInt ? "an " : "a ",
                            ValueTypeName(want), " expression, got ",
                            got == ValueType::kInt ? "an " : "a ", ValueTypeName(got), hint),
                     text, 0, static_cast<int>(text.size())));
  }
  return e;
}

bool Expr::Evaluate(const Scalar* slots, Scalar* out, EvalError* error) const {
  const std::vector<Instruction>& code = *code_;
  if (code.size() == 1 && code[0].op == Op::kPush) {
    *out = code[0].imm;
    return true;
  }
  return Run(code, max_stack_, slots, out, error);
}

bool Expr::EvaluateBool(const Scalar* slots, bool* out, EvalError* error) const {
  Scalar v;
  if (!Evaluate(slots, &v, error)) return false;
  *out = type_ == ValueType::kFloat ? v.f != 0.0 : v.i != 0;
  return true;
}

bool Expr::EvaluateInt(const Scalar* slots, std::int64_t* out, EvalError* error) const {
  Scalar v;
  if (!Evaluate(slots, &v, error)) return false;
  if (type_ == ValueType::kFloat) {
    if (!(v.f > -9.2233720368547758e18 && v.f < 9.2233720368547758e18)) {
      if (error != nullptr) *error = EvalError{EvalErrorKind::kDomain, 0};
      return false;
    }
    *out = static_cast<std::int64_t>(v.f);
  } else {
    *out = v.i;
  }
  return true;
}

bool Expr::EvaluateDouble(const Scalar* slots, double* out, EvalError* error) const {
  Scalar v;
  if (!Evaluate(slots, &v, error)) return false;
  *out = type_ == ValueType::kFloat ? v.f : static_cast<double>(v.i);
  return true;
}

std::string Expr::Describe(const EvalError& error) const {
  const char* what = "evaluation failed";
  switch (error.kind) {
    case EvalErrorKind::kNone: what = "no error"; break;
    case EvalErrorKind::kDivisionByZero: what = "division by zero"; break;
    case EvalErrorKind::kOverflow: what = "integer overflow"; break;
    case EvalErrorKind::kNegativeExponent:
      what = "negative exponent in integer power (write 2.0 ** n for a float)";
      break;
    case EvalErrorKind::kDomain: what = "value out of the integer range"; break;
  }
  return CaretMessage(what, text_, error.position);
}

}  // namespace ktune
