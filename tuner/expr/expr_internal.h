// The expression language's insides, shared by its parts: the lexer
// (expr_lex.cc), the parser and type checker (expr_parse.cc), code
// generation and the stack machine (expr_vm.cc). Not part of the API:
// include tuner/expr/expr.h.
#ifndef KTUNE_TUNER_EXPR_EXPR_INTERNAL_H_
#define KTUNE_TUNER_EXPR_EXPR_INTERNAL_H_

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "tuner/expr/expr.h"

namespace ktune {

enum class Expr::Op : std::uint8_t {
  kPush,        // imm
  kLoad,        // arg = slot
  kIntToFloat,  // top
  kFloatToInt,  // trunc; domain error on NaN/out of range
  kTruthInt,    // top != 0
  kTruthFloat,
  kAddI,
  kSubI,
  kMulI,
  kDivI,
  kFloorDivI,
  kModI,
  kPowI,
  kAddF,
  kSubF,
  kMulF,
  kDivF,
  kFloorDivF,
  kModF,
  kPowF,
  kNegI,
  kNegF,
  kNot,
  kBitNot,
  kBitAnd,
  kBitOr,
  kBitXor,
  kShl,
  kShr,
  kEqI,
  kNeI,
  kLtI,
  kLeI,
  kGtI,
  kGeI,
  kEqF,
  kNeF,
  kLtF,
  kLeF,
  kGtF,
  kGeF,
  kJump,             // arg = target
  kJumpIfFalse,      // pops; arg = target
  kJumpIfFalseKeep,  // keeps top when jumping, pops otherwise
  kJumpIfTrueKeep,
  kPop,
  kMinI,
  kMaxI,
  kMinF,
  kMaxF,
  kAbsI,
  kAbsF,
  kCeilDivI,
  kFloorF,
  kCeilF,
  kRoundF,  // float -> int
  kSqrtF,
  kLog2F,
  kLogF,
  kExpF,
};

struct Expr::Instruction {
  Op op;
  int arg = 0;
  int position = 0;
  Scalar imm = IntScalar(0);
};

namespace expr_internal {

using Op = Expr::Op;
using Instruction = Expr::Instruction;

inline bool IsIdentStart(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
inline bool IsIdentChar(char c) { return IsIdentStart(c) || (c >= '0' && c <= '9'); }

// ---------------------------------------------------------------- lexer

enum class Tok {
  kEnd,
  kInt,
  kFloat,
  kString,
  kIdent,
  kLParen,
  kRParen,
  kComma,
  kQuestion,
  kColon,
  kPlus,
  kMinus,
  kStar,
  kSlash,
  kSlashSlash,
  kPercent,
  kStarStar,
  kAmp,
  kPipe,
  kCaret,
  kTilde,
  kShl,
  kShr,
  kEq,
  kNe,
  kLt,
  kLe,
  kGt,
  kGe,
  kAndAnd,
  kOrOr,
  kBang,
  kAnd,
  kOr,
  kNot,
  kIf,
  kElse,
  kTrue,
  kFalse,
};

struct Token {
  Tok kind = Tok::kEnd;
  int pos = 0;
  int len = 0;
  std::string_view text;
  std::int64_t i = 0;
  double f = 0;
  std::string s;
};

// Splits an expression's text into tokens. Not thread-safe.
class Lexer {
 public:
  explicit Lexer(std::string_view text) : text_(text) {}
  // Reads the next token; false on a lexing error (see error()).
  bool Advance();
  const Token& token() const { return tok_; }
  // The first lexing error, with a caret under it.
  const absl::Status& error() const { return error_; }

 private:
  bool Fail(int pos, int len, std::string_view what);
  bool LexNumber();
  bool LexString(char quote);

  std::string_view text_;
  std::size_t cur_ = 0;
  Token tok_;
  absl::Status error_;
};

// ---------------------------------------------------------------- AST

struct Node {
  enum class Kind {
    kConst,
    kSlot,
    kUnary,
    kBinary,
    kCompare,
    kAnd,
    kOr,
    kNot,
    kTernary,
    kCall,
    kConvert
  };
  Kind kind;
  ValueType type;
  int pos = 0;
  int len = 1;
  Op op = Op::kPush;  // kUnary/kBinary/kCall/kConvert: the typed opcode
  Scalar value = IntScalar(0);
  int slot = -1;
  std::vector<std::unique_ptr<Node>> kids;
  // kCompare: ops between consecutive kids (already typed per pair).
  std::vector<Op> compare_ops;
  std::vector<int> compare_pos;
};

using NodePtr = std::unique_ptr<Node>;

inline bool IsNumeric(ValueType t) {
  return t == ValueType::kInt || t == ValueType::kFloat || t == ValueType::kBool;
}

// Parses and type-checks `text` against `symbols` (strings are interned
// there). INVALID_ARGUMENT with a caret message.
absl::StatusOr<NodePtr> Parse(std::string_view text, SymbolTable& symbols);

// ---------------------------------------------------------------- code

// The stack machine's code for a checked tree.
struct Generated {
  std::vector<Instruction> code;
  std::set<int> slots;  // slots the code reads
  int max_depth = 0;    // stack it needs
};
Generated Generate(const Node& root);

// Runs `code` on a stack of at least `max_stack` over `slots`: false, with
// *error, on a run-time error.
bool Run(const std::vector<Instruction>& code, int max_stack, const Scalar* slots, Scalar* out,
         EvalError* error);

}  // namespace expr_internal
}  // namespace ktune

#endif  // KTUNE_TUNER_EXPR_EXPR_INTERNAL_H_
