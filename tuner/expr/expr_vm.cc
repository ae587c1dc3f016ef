#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <vector>

#include "tuner/expr/expr_internal.h"

namespace ktune::expr_internal {
namespace {

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

}  // namespace

Generated Generate(const Node& root) {
  CodeGen gen;
  gen.Gen(root);
  return Generated{std::move(gen.code), std::move(gen.slots), gen.max_depth};
}

inline std::int64_t FloorDiv(std::int64_t a, std::int64_t b) {
  std::int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

namespace {

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


// Integer arithmetic, bitwise operations and comparisons, and the integer
// builtins, on the stack's top: kNone, or why the instruction failed.
[[gnu::always_inline]] inline EvalErrorKind StepInt(Op op, Scalar* stack, int& sp) {
  constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
  if (op == Op::kNegI || op == Op::kAbsI || op == Op::kNot || op == Op::kBitNot ||
      op == Op::kTruthInt) {
    std::int64_t& a = stack[sp].i;
    if ((op == Op::kNegI || op == Op::kAbsI) && a == kMin) return EvalErrorKind::kOverflow;
    a = op == Op::kNegI     ? -a
        : op == Op::kAbsI   ? (a < 0 ? -a : a)
        : op == Op::kNot    ? (a == 0)
        : op == Op::kBitNot ? ~a
                            : (a != 0);
    return EvalErrorKind::kNone;
  }
  const std::int64_t b = stack[sp--].i;
  std::int64_t& a = stack[sp].i;
  switch (op) {
    case Op::kAddI: return __builtin_add_overflow(a, b, &a) ? EvalErrorKind::kOverflow
                                                            : EvalErrorKind::kNone;
    case Op::kSubI: return __builtin_sub_overflow(a, b, &a) ? EvalErrorKind::kOverflow
                                                            : EvalErrorKind::kNone;
    case Op::kMulI: return __builtin_mul_overflow(a, b, &a) ? EvalErrorKind::kOverflow
                                                            : EvalErrorKind::kNone;
    case Op::kDivI:
    case Op::kFloorDivI:
    case Op::kModI:
    case Op::kCeilDivI:
      if (b == 0) return EvalErrorKind::kDivisionByZero;
      if (b == -1 && a == kMin) {
        if (op != Op::kModI) return EvalErrorKind::kOverflow;
        a = 0;
        return EvalErrorKind::kNone;
      }
      if (op == Op::kCeilDivI) {
        std::int64_t q = a / b;
        if (a % b != 0 && ((a > 0) == (b > 0))) ++q;
        a = q;
      } else {
        a = op == Op::kDivI ? a / b : op == Op::kFloorDivI ? FloorDiv(a, b) : a % b;
      }
      return EvalErrorKind::kNone;
    case Op::kPowI:
      if (b < 0) return EvalErrorKind::kNegativeExponent;
      return IPow(a, b, &a) ? EvalErrorKind::kNone : EvalErrorKind::kOverflow;
    case Op::kShl:
    case Op::kShr:
      if (b < 0 || b > 63) return EvalErrorKind::kOverflow;
      if (op == Op::kShr) {
        a >>= b;
      } else if (a < 0 || (b > 0 && (a >> (63 - b)) != 0)) {
        return EvalErrorKind::kOverflow;
      } else {
        a <<= b;
      }
      return EvalErrorKind::kNone;
    case Op::kBitAnd: a &= b; break;
    case Op::kBitOr: a |= b; break;
    case Op::kBitXor: a ^= b; break;
    case Op::kEqI: a = a == b; break;
    case Op::kNeI: a = a != b; break;
    case Op::kLtI: a = a < b; break;
    case Op::kLeI: a = a <= b; break;
    case Op::kGtI: a = a > b; break;
    case Op::kGeI: a = a >= b; break;
    case Op::kMinI: a = std::min(a, b); break;
    case Op::kMaxI: a = std::max(a, b); break;
    default: break;
  }
  return EvalErrorKind::kNone;
}

// An int from a double, when it fits.
[[gnu::always_inline]] inline EvalErrorKind ToInt(double v, std::int64_t* out) {
  if (!(v > -9.2233720368547758e18 && v < 9.2233720368547758e18)) return EvalErrorKind::kDomain;
  *out = static_cast<std::int64_t>(v);
  return EvalErrorKind::kNone;
}

// Floating-point arithmetic, comparisons, conversions and builtins, on the
// stack's top: kNone, or why the instruction failed.
[[gnu::always_inline]] inline EvalErrorKind StepFloat(Op op, Scalar* stack, int& sp) {
  Scalar& top = stack[sp];
  switch (op) {
    case Op::kIntToFloat: top.f = static_cast<double>(top.i); return EvalErrorKind::kNone;
    case Op::kFloatToInt: return ToInt(top.f, &top.i);
    case Op::kTruthFloat: top.i = top.f != 0.0; return EvalErrorKind::kNone;
    case Op::kNegF: top.f = -top.f; return EvalErrorKind::kNone;
    case Op::kAbsF: top.f = std::fabs(top.f); return EvalErrorKind::kNone;
    case Op::kSqrtF: top.f = std::sqrt(top.f); return EvalErrorKind::kNone;
    case Op::kLog2F: top.f = std::log2(top.f); return EvalErrorKind::kNone;
    case Op::kLogF: top.f = std::log(top.f); return EvalErrorKind::kNone;
    case Op::kExpF: top.f = std::exp(top.f); return EvalErrorKind::kNone;
    case Op::kFloorF: return ToInt(std::floor(top.f), &top.i);
    case Op::kCeilF: return ToInt(std::ceil(top.f), &top.i);
    case Op::kRoundF: return ToInt(std::round(top.f), &top.i);
    default: break;
  }
  const double b = stack[sp--].f;
  Scalar& a = stack[sp];
  switch (op) {
    case Op::kAddF: a.f = a.f + b; break;
    case Op::kSubF: a.f = a.f - b; break;
    case Op::kMulF: a.f = a.f * b; break;
    case Op::kDivF:
    case Op::kFloorDivF:
    case Op::kModF:
      if (b == 0.0) return EvalErrorKind::kDivisionByZero;
      a.f = op == Op::kDivF ? a.f / b : op == Op::kFloorDivF ? std::floor(a.f / b) : std::fmod(a.f, b);
      break;
    case Op::kPowF: a.f = std::pow(a.f, b); break;
    case Op::kMinF: a.f = std::fmin(a.f, b); break;
    case Op::kMaxF: a.f = std::fmax(a.f, b); break;
    case Op::kEqF: a.i = a.f == b; break;
    case Op::kNeF: a.i = a.f != b; break;
    case Op::kLtF: a.i = a.f < b; break;
    case Op::kLeF: a.i = a.f <= b; break;
    case Op::kGtF: a.i = a.f > b; break;
    case Op::kGeF: a.i = a.f >= b; break;
    default: break;
  }
  return EvalErrorKind::kNone;
}

}  // namespace

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
  for (std::size_t pc = 0; pc < n; ++pc) {
    const Instruction& ins = code[pc];
    EvalErrorKind failed = EvalErrorKind::kNone;
    switch (ins.op) {
      case Op::kPush: stack[++sp] = ins.imm; break;
      case Op::kLoad: stack[++sp] = slots[ins.arg]; break;
      case Op::kJump: pc = static_cast<std::size_t>(ins.arg) - 1; break;
      case Op::kJumpIfFalse:
        if (stack[sp--].i == 0) pc = static_cast<std::size_t>(ins.arg) - 1;
        break;
      case Op::kJumpIfFalseKeep:
      case Op::kJumpIfTrueKeep:
        if ((stack[sp].i != 0) == (ins.op == Op::kJumpIfTrueKeep)) {
          pc = static_cast<std::size_t>(ins.arg) - 1;
        } else {
          --sp;
        }
        break;
      case Op::kPop: --sp; break;
      case Op::kTruthInt:
      case Op::kAddI:
      case Op::kSubI:
      case Op::kMulI:
      case Op::kDivI:
      case Op::kFloorDivI:
      case Op::kModI:
      case Op::kPowI:
      case Op::kNegI:
      case Op::kNot:
      case Op::kBitNot:
      case Op::kBitAnd:
      case Op::kBitOr:
      case Op::kBitXor:
      case Op::kShl:
      case Op::kShr:
      case Op::kEqI:
      case Op::kNeI:
      case Op::kLtI:
      case Op::kLeI:
      case Op::kGtI:
      case Op::kGeI:
      case Op::kMinI:
      case Op::kMaxI:
      case Op::kAbsI:
      case Op::kCeilDivI: failed = StepInt(ins.op, stack, sp); break;
      default: failed = StepFloat(ins.op, stack, sp); break;
    }
    if (failed != EvalErrorKind::kNone) {
      if (error != nullptr) {
        error->kind = failed;
        error->position = ins.position;
      }
      return false;
    }
  }
  *out = stack[0];
  return true;
}

}  // namespace ktune::expr_internal
