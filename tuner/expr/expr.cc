#include "tuner/expr/expr.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <set>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "tuner/base/strings.h"

namespace ktune {

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

bool IsIdentStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsIdentChar(char c) { return IsIdentStart(c) || (c >= '0' && c <= '9'); }

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

// ---------------------------------------------------------------- opcodes

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

namespace {

using Op = Expr::Op;
using Instruction = Expr::Instruction;

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

bool IsNumeric(ValueType t) {
  return t == ValueType::kInt || t == ValueType::kFloat || t == ValueType::kBool;
}

class Compiler {
 public:
  Compiler(std::string_view text, SymbolTable& symbols) : text_(text), symbols_(symbols) {}

  absl::StatusOr<NodePtr> Parse() {
    if (text_.size() > 100000) {
      return absl::InvalidArgumentError("expression longer than 100000 characters");
    }
    if (!Advance()) return error_;
    NodePtr n = ParseTernary();
    if (!n) return error_;
    if (tok_.kind != Tok::kEnd) {
      Fail(tok_.pos, tok_.len, "unexpected text after the expression");
      return error_;
    }
    return n;
  }

 private:
  static constexpr int kMaxDepth = 200;

  bool Fail(int pos, int len, std::string_view what) {
    if (error_.ok()) {
      error_ = absl::InvalidArgumentError(CaretMessage(what, text_, pos, len));
    }
    return false;
  }
  NodePtr FailNode(int pos, int len, std::string_view what) {
    Fail(pos, len, what);
    return nullptr;
  }

  // ---- lexer
  bool Advance() {
    while (cur_ < text_.size() && (text_[cur_] == ' ' || text_[cur_] == '\t' ||
                                   text_[cur_] == '\n' || text_[cur_] == '\r')) {
      ++cur_;
    }
    tok_ = Token{};
    tok_.pos = static_cast<int>(cur_);
    if (cur_ >= text_.size()) {
      tok_.kind = Tok::kEnd;
      return true;
    }
    const char c = text_[cur_];
    auto two = [&](char a, char b) {
      return c == a && cur_ + 1 < text_.size() && text_[cur_ + 1] == b;
    };
    auto emit = [&](Tok k, int n) {
      tok_.kind = k;
      tok_.len = n;
      tok_.text = text_.substr(cur_, static_cast<std::size_t>(n));
      cur_ += static_cast<std::size_t>(n);
      return true;
    };
    if (IsIdentStart(c)) {
      std::size_t end = cur_;
      while (end < text_.size() && IsIdentChar(text_[end])) ++end;
      const std::string_view word = text_.substr(cur_, end - cur_);
      Tok k = Tok::kIdent;
      if (word == "and")
        k = Tok::kAnd;
      else if (word == "or")
        k = Tok::kOr;
      else if (word == "not")
        k = Tok::kNot;
      else if (word == "if")
        k = Tok::kIf;
      else if (word == "else")
        k = Tok::kElse;
      else if (word == "true" || word == "True")
        k = Tok::kTrue;
      else if (word == "false" || word == "False")
        k = Tok::kFalse;
      return emit(k, static_cast<int>(end - cur_));
    }
    if ((c >= '0' && c <= '9') ||
        (c == '.' && cur_ + 1 < text_.size() && text_[cur_ + 1] >= '0' && text_[cur_ + 1] <= '9')) {
      return LexNumber();
    }
    if (c == '"' || c == '\'') return LexString(c);
    if (two('*', '*')) return emit(Tok::kStarStar, 2);
    if (two('/', '/')) return emit(Tok::kSlashSlash, 2);
    if (two('<', '<')) return emit(Tok::kShl, 2);
    if (two('>', '>')) return emit(Tok::kShr, 2);
    if (two('=', '=')) return emit(Tok::kEq, 2);
    if (two('!', '=')) return emit(Tok::kNe, 2);
    if (two('<', '=')) return emit(Tok::kLe, 2);
    if (two('>', '=')) return emit(Tok::kGe, 2);
    if (two('&', '&')) return emit(Tok::kAndAnd, 2);
    if (two('|', '|')) return emit(Tok::kOrOr, 2);
    switch (c) {
      case '(': return emit(Tok::kLParen, 1);
      case ')': return emit(Tok::kRParen, 1);
      case ',': return emit(Tok::kComma, 1);
      case '?': return emit(Tok::kQuestion, 1);
      case ':': return emit(Tok::kColon, 1);
      case '+': return emit(Tok::kPlus, 1);
      case '-': return emit(Tok::kMinus, 1);
      case '*': return emit(Tok::kStar, 1);
      case '/': return emit(Tok::kSlash, 1);
      case '%': return emit(Tok::kPercent, 1);
      case '&': return emit(Tok::kAmp, 1);
      case '|': return emit(Tok::kPipe, 1);
      case '^': return emit(Tok::kCaret, 1);
      case '~': return emit(Tok::kTilde, 1);
      case '<': return emit(Tok::kLt, 1);
      case '>': return emit(Tok::kGt, 1);
      case '!': return emit(Tok::kBang, 1);
      case '=':
        return Fail(static_cast<int>(cur_), 1, "'=' is not an operator; use '==' to compare");
      default: break;
    }
    return Fail(static_cast<int>(cur_), 1,
                StrCat("unexpected character '", std::string(1, c), "'"));
  }

  bool LexNumber() {
    const std::size_t start = cur_;
    std::size_t end = cur_;
    bool is_float = false;
    if (text_[end] == '0' && end + 1 < text_.size() &&
        (text_[end + 1] == 'x' || text_[end + 1] == 'X')) {
      end += 2;
      const std::size_t digits = end;
      while (end < text_.size() && std::isxdigit(static_cast<unsigned char>(text_[end]))) ++end;
      std::uint64_t v = 0;
      auto [p, ec] = std::from_chars(text_.data() + digits, text_.data() + end, v, 16);
      if (digits == end || ec != std::errc() ||
          v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        return Fail(static_cast<int>(start), static_cast<int>(end - start),
                    "bad hexadecimal number");
      }
      tok_.kind = Tok::kInt;
      tok_.i = static_cast<std::int64_t>(v);
    } else {
      while (end < text_.size() && text_[end] >= '0' && text_[end] <= '9') ++end;
      if (end < text_.size() && text_[end] == '.') {
        is_float = true;
        ++end;
        while (end < text_.size() && text_[end] >= '0' && text_[end] <= '9') ++end;
      }
      if (end < text_.size() && (text_[end] == 'e' || text_[end] == 'E')) {
        std::size_t e = end + 1;
        if (e < text_.size() && (text_[e] == '+' || text_[e] == '-')) ++e;
        if (e < text_.size() && text_[e] >= '0' && text_[e] <= '9') {
          is_float = true;
          end = e;
          while (end < text_.size() && text_[end] >= '0' && text_[end] <= '9') ++end;
        }
      }
      const char* first = text_.data() + start;
      const char* last = text_.data() + end;
      if (is_float) {
        auto [p, ec] = std::from_chars(first, last, tok_.f);
        if (ec != std::errc() || p != last) {
          return Fail(static_cast<int>(start), static_cast<int>(end - start), "bad number");
        }
        tok_.kind = Tok::kFloat;
      } else {
        auto [p, ec] = std::from_chars(first, last, tok_.i);
        if (ec != std::errc() || p != last) {
          return Fail(static_cast<int>(start), static_cast<int>(end - start),
                      "integer literal does not fit in 64 bits");
        }
        tok_.kind = Tok::kInt;
      }
    }
    if (end < text_.size() && IsIdentChar(text_[end])) {
      return Fail(static_cast<int>(end), 1, "unexpected character after a number");
    }
    tok_.len = static_cast<int>(end - start);
    tok_.text = text_.substr(start, end - start);
    cur_ = end;
    return true;
  }

  bool LexString(char quote) {
    const std::size_t start = cur_;
    std::size_t i = cur_ + 1;
    std::string s;
    while (i < text_.size() && text_[i] != quote) {
      if (text_[i] == '\\' && i + 1 < text_.size()) {
        ++i;
        const char e = text_[i];
        s.push_back(e == 'n' ? '\n' : e == 't' ? '\t' : e);
      } else {
        s.push_back(text_[i]);
      }
      ++i;
    }
    if (i >= text_.size()) {
      return Fail(static_cast<int>(start), static_cast<int>(i - start), "unterminated string");
    }
    tok_.kind = Tok::kString;
    tok_.s = std::move(s);
    tok_.len = static_cast<int>(i + 1 - start);
    tok_.text = text_.substr(start, i + 1 - start);
    cur_ = i + 1;
    return true;
  }

  // ---- node helpers
  static NodePtr Make(Node::Kind kind, ValueType type, int pos, int len) {
    auto n = std::make_unique<Node>();
    n->kind = kind;
    n->type = type;
    n->pos = pos;
    n->len = std::max(1, len);
    return n;
  }
  static int End(const Node& n) { return n.pos + n.len; }

  // Widens an int (or bool) node to float.
  static NodePtr ToFloat(NodePtr n) {
    if (n->type == ValueType::kFloat) return n;
    auto c = Make(Node::Kind::kConvert, ValueType::kFloat, n->pos, n->len);
    c->op = Op::kIntToFloat;
    c->kids.push_back(std::move(n));
    return c;
  }

  // Converts a numeric node to a 0/1 truth value.
  NodePtr ToTruth(NodePtr n, std::string_view context) {
    if (n->type == ValueType::kBool) return n;
    if (n->type == ValueType::kString) {
      return FailNode(n->pos, n->len, StrCat("a string cannot be used as a condition ", context));
    }
    auto c = Make(Node::Kind::kConvert, ValueType::kBool, n->pos, n->len);
    c->op = n->type == ValueType::kFloat ? Op::kTruthFloat : Op::kTruthInt;
    c->kids.push_back(std::move(n));
    return c;
  }

  bool Enter() {
    if (++depth_ > kMaxDepth) {
      return Fail(tok_.pos, tok_.len, "expression nested too deeply");
    }
    return true;
  }

  // ---- grammar
  NodePtr ParseTernary() {
    if (!Enter()) return nullptr;
    NodePtr cond = ParseOr();
    if (!cond) return nullptr;
    if (tok_.kind == Tok::kQuestion) {
      const int qpos = tok_.pos;
      if (!Advance()) return nullptr;
      NodePtr a = ParseTernary();
      if (!a) return nullptr;
      if (tok_.kind != Tok::kColon) {
        return FailNode(tok_.pos, tok_.len, "expected ':' in 'c ? a : b'");
      }
      if (!Advance()) return nullptr;
      NodePtr b = ParseTernary();
      if (!b) return nullptr;
      --depth_;
      return MakeTernary(std::move(cond), std::move(a), std::move(b), qpos);
    }
    if (tok_.kind == Tok::kIf) {
      // Python: `a if c else b`; `cond` holds a.
      const int ipos = tok_.pos;
      if (!Advance()) return nullptr;
      NodePtr c = ParseOr();
      if (!c) return nullptr;
      if (tok_.kind != Tok::kElse) {
        return FailNode(tok_.pos, tok_.len, "expected 'else' in 'a if c else b'");
      }
      if (!Advance()) return nullptr;
      NodePtr b = ParseTernary();
      if (!b) return nullptr;
      --depth_;
      return MakeTernary(std::move(c), std::move(cond), std::move(b), ipos);
    }
    --depth_;
    return cond;
  }

  NodePtr MakeTernary(NodePtr c, NodePtr a, NodePtr b, int pos) {
    c = ToTruth(std::move(c), "in a conditional expression");
    if (!c) return nullptr;
    ValueType t;
    if (a->type == b->type) {
      t = a->type;
    } else if (IsNumeric(a->type) && IsNumeric(b->type)) {
      if (a->type == ValueType::kFloat || b->type == ValueType::kFloat) {
        t = ValueType::kFloat;
        a = ToFloat(std::move(a));
        b = ToFloat(std::move(b));
      } else {
        t = ValueType::kInt;  // bool and int
      }
    } else {
      return FailNode(pos, 1,
                      StrCat("the two branches have different types (", ValueTypeName(a->type),
                             " and ", ValueTypeName(b->type), ")"));
    }
    const int start = std::min({c->pos, a->pos, b->pos});
    const int end = std::max({End(*c), End(*a), End(*b)});
    auto n = Make(Node::Kind::kTernary, t, start, end - start);
    n->kids.push_back(std::move(c));
    n->kids.push_back(std::move(a));
    n->kids.push_back(std::move(b));
    return n;
  }

  NodePtr ParseOr() {
    NodePtr left = ParseAnd();
    while (left && (tok_.kind == Tok::kOr || tok_.kind == Tok::kOrOr)) {
      if (!Advance()) return nullptr;
      NodePtr right = ParseAnd();
      if (!right) return nullptr;
      left = MakeLogical(Node::Kind::kOr, std::move(left), std::move(right));
    }
    return left;
  }

  NodePtr ParseAnd() {
    NodePtr left = ParseNot();
    while (left && (tok_.kind == Tok::kAnd || tok_.kind == Tok::kAndAnd)) {
      if (!Advance()) return nullptr;
      NodePtr right = ParseNot();
      if (!right) return nullptr;
      left = MakeLogical(Node::Kind::kAnd, std::move(left), std::move(right));
    }
    return left;
  }

  NodePtr MakeLogical(Node::Kind kind, NodePtr a, NodePtr b) {
    const char* what = kind == Node::Kind::kAnd ? "of 'and'" : "of 'or'";
    a = ToTruth(std::move(a), what);
    if (!a) return nullptr;
    b = ToTruth(std::move(b), what);
    if (!b) return nullptr;
    auto n = Make(kind, ValueType::kBool, a->pos, End(*b) - a->pos);
    n->kids.push_back(std::move(a));
    n->kids.push_back(std::move(b));
    return n;
  }

  NodePtr ParseNot() {
    if (tok_.kind == Tok::kNot) {
      const int pos = tok_.pos;
      if (!Advance()) return nullptr;
      if (!Enter()) return nullptr;
      NodePtr operand = ParseNot();
      --depth_;
      if (!operand) return nullptr;
      return MakeNot(std::move(operand), pos);
    }
    return ParseComparison();
  }

  NodePtr MakeNot(NodePtr operand, int pos) {
    operand = ToTruth(std::move(operand), "of 'not'");
    if (!operand) return nullptr;
    auto n = Make(Node::Kind::kNot, ValueType::kBool, pos, End(*operand) - pos);
    n->op = Op::kNot;
    n->kids.push_back(std::move(operand));
    return n;
  }

  static bool CompareOp(Tok t) {
    return t == Tok::kEq || t == Tok::kNe || t == Tok::kLt || t == Tok::kLe || t == Tok::kGt ||
           t == Tok::kGe;
  }

  NodePtr ParseComparison() {
    NodePtr first = ParseBitOr();
    if (!first || !CompareOp(tok_.kind)) return first;
    auto n = Make(Node::Kind::kCompare, ValueType::kBool, first->pos, 1);
    n->kids.push_back(std::move(first));
    while (CompareOp(tok_.kind)) {
      const Tok op = tok_.kind;
      const int op_pos = tok_.pos;
      const int op_len = tok_.len;
      if (!Advance()) return nullptr;
      NodePtr right = ParseBitOr();
      if (!right) return nullptr;
      Node& left = *n->kids.back();
      const ValueType lt = left.type, rt = right->type;
      const bool eq = op == Tok::kEq || op == Tok::kNe;
      bool as_float = false;
      if (lt == ValueType::kString || rt == ValueType::kString) {
        if (lt != rt) {
          return FailNode(
              op_pos, op_len,
              StrCat("cannot compare ", ValueTypeName(lt), " with ", ValueTypeName(rt)));
        }
        if (!eq) {
          return FailNode(op_pos, op_len, "strings can only be compared with == and !=");
        }
      } else if (lt == ValueType::kFloat || rt == ValueType::kFloat) {
        as_float = true;
      }
      Op code;
      switch (op) {
        case Tok::kEq: code = as_float ? Op::kEqF : Op::kEqI; break;
        case Tok::kNe: code = as_float ? Op::kNeF : Op::kNeI; break;
        case Tok::kLt: code = as_float ? Op::kLtF : Op::kLtI; break;
        case Tok::kLe: code = as_float ? Op::kLeF : Op::kLeI; break;
        case Tok::kGt: code = as_float ? Op::kGtF : Op::kGtI; break;
        default: code = as_float ? Op::kGeF : Op::kGeI; break;
      }
      if (as_float) {
        // Widen both sides of this pair. In a chain the middle operand is
        // shared, so the chain is lowered pairwise at code generation with
        // each pair's own widening; record it per pair here.
        right = ToFloat(std::move(right));
      }
      n->compare_ops.push_back(code);
      n->compare_pos.push_back(op_pos);
      n->kids.push_back(std::move(right));
    }
    n->len = End(*n->kids.back()) - n->pos;
    return n;
  }

  // Binary arithmetic with numeric promotion. `int_op`/`float_op` are the
  // typed opcodes; int_only ops reject floats.
  NodePtr MakeArith(NodePtr a, NodePtr b, Op int_op, Op float_op, bool int_only, int op_pos,
                    int op_len, std::string_view op_text) {
    if (!IsNumeric(a->type) || !IsNumeric(b->type)) {
      return FailNode(op_pos, op_len,
                      StrCat("cannot apply '", op_text, "' to ", ValueTypeName(a->type), " and ",
                             ValueTypeName(b->type)));
    }
    const bool is_float = a->type == ValueType::kFloat || b->type == ValueType::kFloat;
    if (is_float && int_only) {
      return FailNode(op_pos, op_len,
                      StrCat("'", op_text, "' needs integers, not ", ValueTypeName(a->type),
                             " and ", ValueTypeName(b->type)));
    }
    if (is_float) {
      a = ToFloat(std::move(a));
      b = ToFloat(std::move(b));
    }
    auto n = Make(Node::Kind::kBinary, is_float ? ValueType::kFloat : ValueType::kInt, a->pos,
                  End(*b) - a->pos);
    n->op = is_float ? float_op : int_op;
    n->value = IntScalar(op_pos);  // where run-time errors point
    n->kids.push_back(std::move(a));
    n->kids.push_back(std::move(b));
    return n;
  }

  template <typename Next>
  NodePtr ParseLeftAssoc(Next next, std::initializer_list<std::tuple<Tok, Op, Op, bool>> ops) {
    NodePtr left = (this->*next)();
    while (left) {
      const auto it = std::find_if(ops.begin(), ops.end(),
                                   [&](const auto& o) { return std::get<0>(o) == tok_.kind; });
      if (it == ops.end()) break;
      const int op_pos = tok_.pos;
      const int op_len = tok_.len;
      const std::string op_text(tok_.text);
      if (!Advance()) return nullptr;
      NodePtr right = (this->*next)();
      if (!right) return nullptr;
      left = MakeArith(std::move(left), std::move(right), std::get<1>(*it), std::get<2>(*it),
                       std::get<3>(*it), op_pos, op_len, op_text);
    }
    return left;
  }

  NodePtr ParseBitOr() {
    return ParseLeftAssoc(&Compiler::ParseBitXor, {{Tok::kPipe, Op::kBitOr, Op::kBitOr, true}});
  }
  NodePtr ParseBitXor() {
    return ParseLeftAssoc(&Compiler::ParseBitAnd, {{Tok::kCaret, Op::kBitXor, Op::kBitXor, true}});
  }
  NodePtr ParseBitAnd() {
    return ParseLeftAssoc(&Compiler::ParseShift, {{Tok::kAmp, Op::kBitAnd, Op::kBitAnd, true}});
  }
  NodePtr ParseShift() {
    return ParseLeftAssoc(&Compiler::ParseAdditive, {{Tok::kShl, Op::kShl, Op::kShl, true},
                                                     {Tok::kShr, Op::kShr, Op::kShr, true}});
  }
  NodePtr ParseAdditive() {
    return ParseLeftAssoc(&Compiler::ParseTerm, {{Tok::kPlus, Op::kAddI, Op::kAddF, false},
                                                 {Tok::kMinus, Op::kSubI, Op::kSubF, false}});
  }
  NodePtr ParseTerm() {
    return ParseLeftAssoc(&Compiler::ParseUnary,
                          {{Tok::kStar, Op::kMulI, Op::kMulF, false},
                           {Tok::kSlash, Op::kDivI, Op::kDivF, false},
                           {Tok::kSlashSlash, Op::kFloorDivI, Op::kFloorDivF, false},
                           {Tok::kPercent, Op::kModI, Op::kModF, false}});
  }

  NodePtr ParseUnary() {
    const Tok k = tok_.kind;
    if (k == Tok::kMinus || k == Tok::kPlus || k == Tok::kBang || k == Tok::kTilde) {
      const int pos = tok_.pos;
      if (!Advance()) return nullptr;
      if (!Enter()) return nullptr;
      NodePtr operand = ParseUnary();
      --depth_;
      if (!operand) return nullptr;
      if (k == Tok::kBang) return MakeNot(std::move(operand), pos);
      if (!IsNumeric(operand->type)) {
        return FailNode(pos, 1, StrCat("cannot apply a sign to a ", ValueTypeName(operand->type)));
      }
      if (k == Tok::kPlus) {
        if (operand->type == ValueType::kBool) operand->type = ValueType::kInt;
        return operand;
      }
      if (k == Tok::kTilde && operand->type == ValueType::kFloat) {
        return FailNode(pos, 1, "'~' needs an integer");
      }
      const bool is_float = operand->type == ValueType::kFloat;
      auto n = Make(Node::Kind::kUnary, is_float ? ValueType::kFloat : ValueType::kInt, pos,
                    End(*operand) - pos);
      n->op = k == Tok::kTilde ? Op::kBitNot : is_float ? Op::kNegF : Op::kNegI;
      n->value = IntScalar(pos);
      n->kids.push_back(std::move(operand));
      return n;
    }
    return ParsePower();
  }

  NodePtr ParsePower() {
    NodePtr base = ParsePrimary();
    if (!base || tok_.kind != Tok::kStarStar) return base;
    const int op_pos = tok_.pos;
    if (!Advance()) return nullptr;
    if (!Enter()) return nullptr;
    NodePtr exponent = ParseUnary();  // right-associative, binds -x
    --depth_;
    if (!exponent) return nullptr;
    return MakeArith(std::move(base), std::move(exponent), Op::kPowI, Op::kPowF, false, op_pos, 2,
                     "**");
  }

  NodePtr ParsePrimary() {
    const Token t = tok_;
    switch (t.kind) {
      case Tok::kInt: {
        if (!Advance()) return nullptr;
        auto n = Make(Node::Kind::kConst, ValueType::kInt, t.pos, t.len);
        n->value = IntScalar(t.i);
        return n;
      }
      case Tok::kFloat: {
        if (!Advance()) return nullptr;
        auto n = Make(Node::Kind::kConst, ValueType::kFloat, t.pos, t.len);
        n->value = FloatScalar(t.f);
        return n;
      }
      case Tok::kTrue:
      case Tok::kFalse: {
        if (!Advance()) return nullptr;
        auto n = Make(Node::Kind::kConst, ValueType::kBool, t.pos, t.len);
        n->value = IntScalar(t.kind == Tok::kTrue ? 1 : 0);
        return n;
      }
      case Tok::kString: {
        if (!Advance()) return nullptr;
        auto n = Make(Node::Kind::kConst, ValueType::kString, t.pos, t.len);
        n->value = IntScalar(symbols_.Intern(t.s));
        return n;
      }
      case Tok::kLParen: {
        if (!Advance()) return nullptr;
        NodePtr inner = ParseTernary();
        if (!inner) return nullptr;
        if (tok_.kind != Tok::kRParen) {
          return FailNode(tok_.pos, tok_.len,
                          tok_.kind == Tok::kEnd ? "missing ')'" : "expected ')'");
        }
        const int end = tok_.pos + 1;
        if (!Advance()) return nullptr;
        inner->pos = t.pos;
        inner->len = end - t.pos;
        return inner;
      }
      case Tok::kIdent: {
        if (!Advance()) return nullptr;
        if (tok_.kind == Tok::kLParen) return ParseCall(t);
        const SymbolTable::Symbol* sym = symbols_.Find(t.text);
        if (sym == nullptr) {
          return FailNode(t.pos, t.len, StrCat("unknown name '", t.text, "'"));
        }
        if (sym->slot < 0) {
          auto n = Make(Node::Kind::kConst, sym->type, t.pos, t.len);
          n->value = sym->constant;
          return n;
        }
        auto n = Make(Node::Kind::kSlot, sym->type, t.pos, t.len);
        n->slot = sym->slot;
        return n;
      }
      case Tok::kEnd: return FailNode(t.pos, 1, "unexpected end of expression");
      default: return FailNode(t.pos, t.len, StrCat("unexpected '", t.text, "'"));
    }
  }

  NodePtr ParseCall(const Token& name) {
    if (!Advance()) return nullptr;  // '('
    std::vector<NodePtr> args;
    if (tok_.kind != Tok::kRParen) {
      while (true) {
        NodePtr a = ParseTernary();
        if (!a) return nullptr;
        args.push_back(std::move(a));
        if (tok_.kind == Tok::kComma) {
          if (!Advance()) return nullptr;
          continue;
        }
        break;
      }
    }
    if (tok_.kind != Tok::kRParen) {
      return FailNode(tok_.pos, tok_.len,
                      tok_.kind == Tok::kEnd ? "missing ')'" : "expected ',' or ')'");
    }
    const int end = tok_.pos + 1;
    if (!Advance()) return nullptr;
    return MakeCall(name, std::move(args), end);
  }

  NodePtr MakeCall(const Token& name, std::vector<NodePtr> args, int end) {
    const std::string_view f = name.text;
    const int pos = name.pos;
    auto arity = [&](std::size_t lo, std::size_t hi) -> bool {
      if (args.size() >= lo && args.size() <= hi) return true;
      const std::string want = lo == hi         ? StrCat(lo)
                               : hi == SIZE_MAX ? StrCat("at least ", lo)
                                                : StrCat(lo, " to ", hi);
      return Fail(pos, name.len,
                  StrCat(f, "() takes ", want, " argument", lo == 1 && hi == 1 ? "" : "s", ", not ",
                         args.size()));
    };
    for (const NodePtr& a : args) {
      if (!IsNumeric(a->type)) {
        return FailNode(a->pos, a->len,
                        StrCat(f, "() needs numbers, not a ", ValueTypeName(a->type)));
      }
    }
    bool any_float = false;
    for (const NodePtr& a : args) any_float |= a->type == ValueType::kFloat;

    auto make = [&](ValueType type, Op op) {
      auto n = Make(Node::Kind::kCall, type, pos, end - pos);
      n->op = op;
      n->value = IntScalar(pos);
      for (NodePtr& a : args) n->kids.push_back(std::move(a));
      return n;
    };
    auto all_float = [&] {
      for (NodePtr& a : args) a = ToFloat(std::move(a));
    };
    auto bools_to_int = [&] {
      for (NodePtr& a : args) {
        if (a->type == ValueType::kBool) a->type = ValueType::kInt;
      }
    };

    if (f == "ceil_div") {
      if (!arity(2, 2)) return nullptr;
      if (any_float) {
        return FailNode(pos, name.len, "ceil_div() needs integers");
      }
      bools_to_int();
      return make(ValueType::kInt, Op::kCeilDivI);
    }
    if (f == "min" || f == "max") {
      if (!arity(2, SIZE_MAX)) return nullptr;
      // Fold n-ary into a left-deep chain of binary min/max.
      if (any_float)
        all_float();
      else
        bools_to_int();
      const ValueType t = any_float ? ValueType::kFloat : ValueType::kInt;
      const Op op =
          f == "min" ? (any_float ? Op::kMinF : Op::kMinI) : (any_float ? Op::kMaxF : Op::kMaxI);
      NodePtr acc = std::move(args[0]);
      for (std::size_t i = 1; i < args.size(); ++i) {
        auto n = Make(Node::Kind::kCall, t, pos, end - pos);
        n->op = op;
        n->kids.push_back(std::move(acc));
        n->kids.push_back(std::move(args[i]));
        acc = std::move(n);
      }
      return acc;
    }
    if (f == "abs") {
      if (!arity(1, 1)) return nullptr;
      bools_to_int();
      return make(any_float ? ValueType::kFloat : ValueType::kInt,
                  any_float ? Op::kAbsF : Op::kAbsI);
    }
    if (f == "floor" || f == "ceil" || f == "round" || f == "int") {
      if (!arity(1, 1)) return nullptr;
      if (!any_float) {
        NodePtr a = std::move(args[0]);
        if (a->type == ValueType::kBool) a->type = ValueType::kInt;
        a->pos = pos;
        a->len = end - pos;
        return a;
      }
      const Op op = f == "floor"   ? Op::kFloorF
                    : f == "ceil"  ? Op::kCeilF
                    : f == "round" ? Op::kRoundF
                                   : Op::kFloatToInt;
      return make(ValueType::kInt, op);
    }
    if (f == "float") {
      if (!arity(1, 1)) return nullptr;
      NodePtr a = ToFloat(std::move(args[0]));
      return a;
    }
    if (f == "sqrt" || f == "log2" || f == "log" || f == "exp") {
      if (!arity(1, 1)) return nullptr;
      all_float();
      const Op op = f == "sqrt"   ? Op::kSqrtF
                    : f == "log2" ? Op::kLog2F
                    : f == "log"  ? Op::kLogF
                                  : Op::kExpF;
      return make(ValueType::kFloat, op);
    }
    if (f == "pow") {
      if (!arity(2, 2)) return nullptr;
      NodePtr b = std::move(args[1]);
      NodePtr a = std::move(args[0]);
      return MakeArith(std::move(a), std::move(b), Op::kPowI, Op::kPowF, false, pos, name.len,
                       "pow");
    }
    return FailNode(pos, name.len, StrCat("unknown function '", f, "'"));
  }

  std::string_view text_;
  SymbolTable& symbols_;
  std::size_t cur_ = 0;
  Token tok_;
  int depth_ = 0;
  absl::Status error_;
};

// ---------------------------------------------------------------- codegen

class CodeGen {
 public:
  std::vector<Instruction> code;
  std::set<int> slots;
  int depth = 0;
  int max_depth = 0;

  void Emit(Op op, int arg = 0, int position = 0, Scalar imm = IntScalar(0), int stack_delta = 0) {
    code.push_back(Instruction{op, arg, position, imm});
    depth += stack_delta;
    max_depth = std::max(max_depth, depth);
  }

  void Gen(const Node& n) {
    switch (n.kind) {
      case Node::Kind::kConst: Emit(Op::kPush, 0, n.pos, n.value, +1); return;
      case Node::Kind::kSlot:
        slots.insert(n.slot);
        Emit(Op::kLoad, n.slot, n.pos, IntScalar(0), +1);
        return;
      case Node::Kind::kConvert:
      case Node::Kind::kUnary:
      case Node::Kind::kNot:
        Gen(*n.kids[0]);
        Emit(n.op, 0, static_cast<int>(n.value.i), IntScalar(0), 0);
        return;
      case Node::Kind::kBinary:
        Gen(*n.kids[0]);
        Gen(*n.kids[1]);
        Emit(n.op, 0, static_cast<int>(n.value.i), IntScalar(0), -1);
        return;
      case Node::Kind::kCall:
        for (const auto& k : n.kids) Gen(*k);
        Emit(n.op, 0, static_cast<int>(n.value.i), IntScalar(0),
             1 - static_cast<int>(n.kids.size()));
        return;
      case Node::Kind::kAnd:
      case Node::Kind::kOr: {
        Gen(*n.kids[0]);
        const std::size_t jump = code.size();
        Emit(n.kind == Node::Kind::kAnd ? Op::kJumpIfFalseKeep : Op::kJumpIfTrueKeep);
        depth -= 1;  // the fall-through path pops
        Gen(*n.kids[1]);
        code[jump].arg = static_cast<int>(code.size());
        return;
      }
      case Node::Kind::kTernary: {
        Gen(*n.kids[0]);
        const std::size_t jf = code.size();
        Emit(Op::kJumpIfFalse, 0, 0, IntScalar(0), -1);
        Gen(*n.kids[1]);
        const std::size_t jend = code.size();
        Emit(Op::kJump);
        depth -= 1;  // the else branch starts without the then value
        code[jf].arg = static_cast<int>(code.size());
        Gen(*n.kids[2]);
        code[jend].arg = static_cast<int>(code.size());
        return;
      }
      case Node::Kind::kCompare: {
        // a < b < c  ->  (a < b) and (b < c); operands are pure, so the
        // middle one is simply evaluated twice.
        std::vector<std::size_t> exits;
        for (std::size_t i = 0; i + 1 < n.kids.size(); ++i) {
          const Node& left = *n.kids[i];
          const Node& right = *n.kids[i + 1];
          const bool is_float = IsFloatCompare(n.compare_ops[i]);
          GenOperand(left, is_float);
          GenOperand(right, is_float);
          Emit(n.compare_ops[i], 0, n.compare_pos[i], IntScalar(0), -1);
          if (i + 2 < n.kids.size()) {
            exits.push_back(code.size());
            Emit(Op::kJumpIfFalseKeep);
            depth -= 1;
          }
        }
        for (std::size_t e : exits) code[e].arg = static_cast<int>(code.size());
        return;
      }
    }
  }

 private:
  static bool IsFloatCompare(Op op) {
    return op == Op::kEqF || op == Op::kNeF || op == Op::kLtF || op == Op::kLeF || op == Op::kGtF ||
           op == Op::kGeF;
  }

  // Generates an operand of a comparison, widened to float if the pair
  // compares as float (the node itself may be int when it is shared with a
  // neighbouring int pair).
  void GenOperand(const Node& n, bool as_float) {
    if (n.kind == Node::Kind::kConvert && n.op == Op::kIntToFloat && !as_float) {
      Gen(*n.kids[0]);
      return;
    }
    Gen(n);
    if (as_float && n.type != ValueType::kFloat) {
      Emit(Op::kIntToFloat, 0, n.pos);
    }
  }
};

// ---------------------------------------------------------------- VM

inline std::int64_t FloorDiv(std::int64_t a, std::int64_t b) {
  std::int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

bool IPow(std::int64_t base, std::int64_t exp, std::int64_t* out) {
  std::int64_t result = 1;
  while (exp > 0) {
    if (exp & 1) {
      if (__builtin_mul_overflow(result, base, &result)) return false;
    }
    exp >>= 1;
    if (exp > 0 && __builtin_mul_overflow(base, base, &base)) {
      // base overflowed, but it only matters if it is used again.
      return false;
    }
  }
  *out = result;
  return true;
}

bool Run(const std::vector<Instruction>& code, int max_stack, const Scalar* slots, Scalar* out,
         EvalError* error) {
  Scalar small[32];
  std::vector<Scalar> big;
  Scalar* stack = small;
  if (max_stack > 32) {
    big.resize(static_cast<std::size_t>(max_stack));
    stack = big.data();
  }
  int sp = -1;  // index of the top
  const std::size_t n = code.size();
  auto fail = [&](EvalErrorKind kind, const Instruction& ins) {
    if (error != nullptr) {
      error->kind = kind;
      error->position = ins.position;
    }
    return false;
  };
  for (std::size_t pc = 0; pc < n; ++pc) {
    const Instruction& ins = code[pc];
    switch (ins.op) {
      case Op::kPush: stack[++sp] = ins.imm; break;
      case Op::kLoad: stack[++sp] = slots[ins.arg]; break;
      case Op::kIntToFloat: stack[sp].f = static_cast<double>(stack[sp].i); break;
      case Op::kFloatToInt: {
        const double v = stack[sp].f;
        if (!(v > -9.2233720368547758e18 && v < 9.2233720368547758e18)) {
          return fail(EvalErrorKind::kDomain, ins);
        }
        stack[sp].i = static_cast<std::int64_t>(v);
        break;
      }
      case Op::kTruthInt: stack[sp].i = stack[sp].i != 0; break;
      case Op::kTruthFloat: stack[sp].i = stack[sp].f != 0.0; break;
#define KTUNE_BIN_I(OP, EXPR)             \
  case OP: {                              \
    const std::int64_t b = stack[sp--].i; \
    const std::int64_t a = stack[sp].i;   \
    stack[sp].i = (EXPR);                 \
    break;                                \
  }
#define KTUNE_BIN_F(OP, EXPR)       \
  case OP: {                        \
    const double b = stack[sp--].f; \
    const double a = stack[sp].f;   \
    stack[sp].f = (EXPR);           \
    break;                          \
  }
#define KTUNE_CMP_F(OP, EXPR)       \
  case OP: {                        \
    const double b = stack[sp--].f; \
    const double a = stack[sp].f;   \
    stack[sp].i = (EXPR);           \
    break;                          \
  }
      case Op::kAddI: {
        const std::int64_t b = stack[sp--].i;
        if (__builtin_add_overflow(stack[sp].i, b, &stack[sp].i)) {
          return fail(EvalErrorKind::kOverflow, ins);
        }
        break;
      }
      case Op::kSubI: {
        const std::int64_t b = stack[sp--].i;
        if (__builtin_sub_overflow(stack[sp].i, b, &stack[sp].i)) {
          return fail(EvalErrorKind::kOverflow, ins);
        }
        break;
      }
      case Op::kMulI: {
        const std::int64_t b = stack[sp--].i;
        if (__builtin_mul_overflow(stack[sp].i, b, &stack[sp].i)) {
          return fail(EvalErrorKind::kOverflow, ins);
        }
        break;
      }
      case Op::kDivI:
      case Op::kFloorDivI:
      case Op::kModI: {
        const std::int64_t b = stack[sp--].i;
        const std::int64_t a = stack[sp].i;
        if (b == 0) return fail(EvalErrorKind::kDivisionByZero, ins);
        if (b == -1 && a == std::numeric_limits<std::int64_t>::min()) {
          if (ins.op == Op::kModI) {
            stack[sp].i = 0;
            break;
          }
          return fail(EvalErrorKind::kOverflow, ins);
        }
        stack[sp].i = ins.op == Op::kDivI        ? a / b
                      : ins.op == Op::kFloorDivI ? FloorDiv(a, b)
                                                 : a % b;
        break;
      }
      case Op::kPowI: {
        const std::int64_t b = stack[sp--].i;
        if (b < 0) return fail(EvalErrorKind::kNegativeExponent, ins);
        if (!IPow(stack[sp].i, b, &stack[sp].i)) {
          return fail(EvalErrorKind::kOverflow, ins);
        }
        break;
      }
        KTUNE_BIN_F(Op::kAddF, a + b)
        KTUNE_BIN_F(Op::kSubF, a - b)
        KTUNE_BIN_F(Op::kMulF, a * b)
      case Op::kDivF:
      case Op::kFloorDivF:
      case Op::kModF: {
        const double b = stack[sp--].f;
        const double a = stack[sp].f;
        if (b == 0.0) return fail(EvalErrorKind::kDivisionByZero, ins);
        stack[sp].f = ins.op == Op::kDivF        ? a / b
                      : ins.op == Op::kFloorDivF ? std::floor(a / b)
                                                 : std::fmod(a, b);
        break;
      }
        KTUNE_BIN_F(Op::kPowF, std::pow(a, b))
      case Op::kNegI:
        if (stack[sp].i == std::numeric_limits<std::int64_t>::min()) {
          return fail(EvalErrorKind::kOverflow, ins);
        }
        stack[sp].i = -stack[sp].i;
        break;
      case Op::kNegF: stack[sp].f = -stack[sp].f; break;
      case Op::kNot: stack[sp].i = stack[sp].i == 0; break;
      case Op::kBitNot:
        stack[sp].i = ~stack[sp].i;
        break;
        KTUNE_BIN_I(Op::kBitAnd, a & b)
        KTUNE_BIN_I(Op::kBitOr, a | b)
        KTUNE_BIN_I(Op::kBitXor, a ^ b)
      case Op::kShl:
      case Op::kShr: {
        const std::int64_t b = stack[sp--].i;
        const std::int64_t a = stack[sp].i;
        if (b < 0 || b > 63) return fail(EvalErrorKind::kOverflow, ins);
        if (ins.op == Op::kShl) {
          if (a < 0 || (b > 0 && (a >> (63 - b)) != 0)) {
            return fail(EvalErrorKind::kOverflow, ins);
          }
          stack[sp].i = a << b;
        } else {
          stack[sp].i = a >> b;
        }
        break;
      }
        KTUNE_BIN_I(Op::kEqI, a == b)
        KTUNE_BIN_I(Op::kNeI, a != b)
        KTUNE_BIN_I(Op::kLtI, a < b)
        KTUNE_BIN_I(Op::kLeI, a <= b)
        KTUNE_BIN_I(Op::kGtI, a > b)
        KTUNE_BIN_I(Op::kGeI, a >= b)
        KTUNE_CMP_F(Op::kEqF, a == b)
        KTUNE_CMP_F(Op::kNeF, a != b)
        KTUNE_CMP_F(Op::kLtF, a < b)
        KTUNE_CMP_F(Op::kLeF, a <= b)
        KTUNE_CMP_F(Op::kGtF, a > b)
        KTUNE_CMP_F(Op::kGeF, a >= b)
      case Op::kJump: pc = static_cast<std::size_t>(ins.arg) - 1; break;
      case Op::kJumpIfFalse:
        if (stack[sp--].i == 0) pc = static_cast<std::size_t>(ins.arg) - 1;
        break;
      case Op::kJumpIfFalseKeep:
        if (stack[sp].i == 0) {
          pc = static_cast<std::size_t>(ins.arg) - 1;
        } else {
          --sp;
        }
        break;
      case Op::kJumpIfTrueKeep:
        if (stack[sp].i != 0) {
          pc = static_cast<std::size_t>(ins.arg) - 1;
        } else {
          --sp;
        }
        break;
      case Op::kPop:
        --sp;
        break;
        KTUNE_BIN_I(Op::kMinI, std::min(a, b))
        KTUNE_BIN_I(Op::kMaxI, std::max(a, b))
        KTUNE_BIN_F(Op::kMinF, std::fmin(a, b))
        KTUNE_BIN_F(Op::kMaxF, std::fmax(a, b))
      case Op::kAbsI:
        if (stack[sp].i == std::numeric_limits<std::int64_t>::min()) {
          return fail(EvalErrorKind::kOverflow, ins);
        }
        stack[sp].i = stack[sp].i < 0 ? -stack[sp].i : stack[sp].i;
        break;
      case Op::kAbsF: stack[sp].f = std::fabs(stack[sp].f); break;
      case Op::kCeilDivI: {
        const std::int64_t b = stack[sp--].i;
        const std::int64_t a = stack[sp].i;
        if (b == 0) return fail(EvalErrorKind::kDivisionByZero, ins);
        if (b == -1 && a == std::numeric_limits<std::int64_t>::min()) {
          return fail(EvalErrorKind::kOverflow, ins);
        }
        std::int64_t q = a / b;
        if (a % b != 0 && ((a > 0) == (b > 0))) ++q;
        stack[sp].i = q;
        break;
      }
      case Op::kFloorF:
      case Op::kCeilF:
      case Op::kRoundF: {
        double v = stack[sp].f;
        v = ins.op == Op::kFloorF  ? std::floor(v)
            : ins.op == Op::kCeilF ? std::ceil(v)
                                   : std::round(v);
        if (!(v > -9.2233720368547758e18 && v < 9.2233720368547758e18)) {
          return fail(EvalErrorKind::kDomain, ins);
        }
        stack[sp].i = static_cast<std::int64_t>(v);
        break;
      }
      case Op::kSqrtF: stack[sp].f = std::sqrt(stack[sp].f); break;
      case Op::kLog2F: stack[sp].f = std::log2(stack[sp].f); break;
      case Op::kLogF: stack[sp].f = std::log(stack[sp].f); break;
      case Op::kExpF: stack[sp].f = std::exp(stack[sp].f); break;
#undef KTUNE_BIN_I
#undef KTUNE_BIN_F
#undef KTUNE_CMP_F
    }
  }
  *out = stack[0];
  return true;
}

}  // namespace

// ---------------------------------------------------------------- Expr

absl::StatusOr<Expr> Expr::Compile(std::string_view text, SymbolTable& symbols) {
  Compiler compiler(text, symbols);
  absl::StatusOr<NodePtr> root = compiler.Parse();
  if (!root.ok()) return root.status();
  CodeGen gen;
  gen.Gen(**root);
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
