#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "tuner/base/strings.h"
#include "tuner/expr/expr_internal.h"

namespace ktune::expr_internal {

namespace {

class Compiler {
 public:
  Compiler(std::string_view text, SymbolTable& symbols)
      : text_(text), symbols_(symbols), lexer_(text) {}

  absl::StatusOr<NodePtr> Parse() {
    if (text_.size() > kMaxExpressionChars) {
      return absl::InvalidArgumentError(StrCat("expression of ", text_.size(),
                                               " characters; the limit is ", kMaxExpressionChars,
                                               " (split it into several)"));
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
  static constexpr int kMaxDepth = kMaxExpressionDepth;

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

  // The next token into tok_; false (error_ set) on a lexing error.
  bool Advance() {
    if (!lexer_.Advance()) {
      if (error_.ok()) error_ = lexer_.error();
      return false;
    }
    tok_ = lexer_.token();
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
      return Fail(tok_.pos, tok_.len,
                  StrCat("expression nested too deeply (more than ", kMaxDepth,
                         " levels of parentheses, calls, operators or chained terms); "
                         "split it into several"));
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

  // A chain `a op b op c ...` builds a tree as deep as it is long: each
  // link counts as a level of nesting (compiling and evaluating recurse
  // over the tree).
  NodePtr ParseOr() {
    NodePtr left = ParseAnd();
    int links = 0;
    while (left && (tok_.kind == Tok::kOr || tok_.kind == Tok::kOrOr)) {
      if (!Enter()) return nullptr;
      ++links;
      if (!Advance()) return nullptr;
      NodePtr right = ParseAnd();
      if (!right) return nullptr;
      left = MakeLogical(Node::Kind::kOr, std::move(left), std::move(right));
    }
    depth_ -= links;
    return left;
  }

  NodePtr ParseAnd() {
    NodePtr left = ParseNot();
    int links = 0;
    while (left && (tok_.kind == Tok::kAnd || tok_.kind == Tok::kAndAnd)) {
      if (!Enter()) return nullptr;
      ++links;
      if (!Advance()) return nullptr;
      NodePtr right = ParseNot();
      if (!right) return nullptr;
      left = MakeLogical(Node::Kind::kAnd, std::move(left), std::move(right));
    }
    depth_ -= links;
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
    int links = 0;  // see ParseOr
    while (left) {
      const auto it = std::find_if(ops.begin(), ops.end(),
                                   [&](const auto& o) { return std::get<0>(o) == tok_.kind; });
      if (it == ops.end()) break;
      if (!Enter()) return nullptr;
      ++links;
      const int op_pos = tok_.pos;
      const int op_len = tok_.len;
      const std::string op_text(tok_.text);
      if (!Advance()) return nullptr;
      NodePtr right = (this->*next)();
      if (!right) return nullptr;
      left = MakeArith(std::move(left), std::move(right), std::get<1>(*it), std::get<2>(*it),
                       std::get<3>(*it), op_pos, op_len, op_text);
    }
    depth_ -= links;
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
  Lexer lexer_;
  Token tok_;
  int depth_ = 0;
  absl::Status error_;
};

}  // namespace

absl::StatusOr<NodePtr> Parse(std::string_view text, SymbolTable& symbols) {
  Compiler compiler(text, symbols);
  return compiler.Parse();
}

}  // namespace ktune::expr_internal
