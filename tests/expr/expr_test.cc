#include "tuner/expr/expr.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace ktune {
namespace {

using ::testing::HasSubstr;

// Names available to every case: bx = 32, by = 8, f = 2.5, flag = true,
// mode = "fast" (slots), N = 1000 (constant).
class ExprTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(symbols_.AddSlot("bx", ValueType::kInt, 0).ok());
    ASSERT_TRUE(symbols_.AddSlot("by", ValueType::kInt, 1).ok());
    ASSERT_TRUE(symbols_.AddSlot("f", ValueType::kFloat, 2).ok());
    ASSERT_TRUE(symbols_.AddSlot("flag", ValueType::kBool, 3).ok());
    ASSERT_TRUE(symbols_.AddSlot("mode", ValueType::kString, 4).ok());
    ASSERT_TRUE(symbols_.AddConstant("N", ValueType::kInt, IntScalar(1000)).ok());
    slots_ = {IntScalar(32), IntScalar(8), FloatScalar(2.5), IntScalar(1),
              IntScalar(symbols_.Intern("fast"))};
  }

  SymbolTable symbols_;
  std::vector<Scalar> slots_;
};

struct IntCase {
  const char* text;
  std::int64_t want;
};

TEST_F(ExprTest, IntegerArithmeticStaysInteger) {
  const IntCase cases[] = {
      {"1 + 2 * 3", 7},
      {"(1 + 2) * 3", 9},
      {"bx * by", 256},
      {"7 / 2", 3},
      {"-7 / 2", -3},   // truncates, as in C++
      {"-7 // 2", -4},  // floors
      {"7 % 3", 1},
      {"-7 % 3", -1},  // C++ remainder
      {"2 ** 10", 1024},
      {"2 ** 3 ** 2", 512},  // right-associative
      {"-2 ** 2", -4},       // ** binds tighter than unary minus
      {"ceil_div(N, bx)", 32},
      {"ceil_div(1024, bx)", 32},
      {"ceil_div(-7, 2)", -3},
      {"min(bx, by, 4)", 4},
      {"max(bx, by)", 32},
      {"abs(-5)", 5},
      {"1 << 4", 16},
      {"255 & 15 | 256", 271},
      {"6 ^ 3", 5},
      {"~0", -1},
      {"0x10 + 1", 17},
      {"flag + 1", 2},  // bool counts as 0/1 in arithmetic
      {"int(f * 2)", 5},
      {"floor(f)", 2},
      {"ceil(f)", 3},
      {"round(f)", 3},
      {"bx if flag else by", 32},
      {"flag ? by : bx", 8},
      {"N", 1000},
  };
  for (const IntCase& c : cases) {
    absl::StatusOr<Expr> e = Expr::Compile(c.text, symbols_);
    ASSERT_TRUE(e.ok()) << c.text << ": " << e.status();
    EXPECT_EQ(e->type(), ValueType::kInt) << c.text;
    std::int64_t got = 0;
    ASSERT_TRUE(e->EvaluateInt(slots_.data(), &got)) << c.text;
    EXPECT_EQ(got, c.want) << c.text;
  }
}

struct FloatCase {
  const char* text;
  double want;
};

TEST_F(ExprTest, FloatWhereAsked) {
  const FloatCase cases[] = {
      {"7.0 / 2", 3.5},      {"f * 2", 5.0},    {"bx / 64.0", 0.5}, {"1e3", 1000.0},
      {"float(7) / 2", 3.5}, {"sqrt(16)", 4.0}, {"log2(bx)", 5.0},  {"2.0 ** -1", 0.5},
      {"min(1, f)", 1.0},    {"7.5 // 2", 3.0}, {"7.5 % 2", 1.5},   {"2.0 * N * N / 1e6", 2.0},
  };
  for (const FloatCase& c : cases) {
    absl::StatusOr<Expr> e = Expr::Compile(c.text, symbols_);
    ASSERT_TRUE(e.ok()) << c.text << ": " << e.status();
    EXPECT_EQ(e->type(), ValueType::kFloat) << c.text;
    double got = 0;
    ASSERT_TRUE(e->EvaluateDouble(slots_.data(), &got)) << c.text;
    EXPECT_DOUBLE_EQ(got, c.want) << c.text;
  }
}

struct BoolCase {
  const char* text;
  bool want;
};

TEST_F(ExprTest, ComparisonsAndLogic) {
  const BoolCase cases[] = {
      {"bx * by <= 1024", true},
      {"bx * by > 1024", false},
      {"32 <= bx * by <= 1024", true},  // chained as in Python
      {"1 < 2 < 2", false},
      {"3 > 2 > 1", true},
      {"bx == 32 and by == 8", true},
      {"bx == 32 && by == 9", false},
      {"bx == 1 or by == 8", true},
      {"bx == 1 || by == 1", false},
      {"not bx == 32", false},
      {"!flag", false},
      {"mode == 'fast'", true},
      {"mode != \"fast\"", false},
      {"f > 2", true},
      {"f == 2.5", true},
      {"bx % 32 != 0 or flag", true},
      {"flag == 1", true},
      {"True and not False", true},
      {"bx & 1 == 0", true},  // Python precedence: (bx & 1) == 0
  };
  for (const BoolCase& c : cases) {
    absl::StatusOr<Expr> e = Expr::Compile(c.text, symbols_);
    ASSERT_TRUE(e.ok()) << c.text << ": " << e.status();
    EXPECT_EQ(e->type(), ValueType::kBool) << c.text;
    bool got = !c.want;
    ASSERT_TRUE(e->EvaluateBool(slots_.data(), &got)) << c.text;
    EXPECT_EQ(got, c.want) << c.text;
  }
}

TEST_F(ExprTest, ShortCircuitSkipsFailingOperand) {
  absl::StatusOr<Expr> e = Expr::Compile("bx == 1 and 10 / (bx - 32) > 0", symbols_);
  ASSERT_TRUE(e.ok()) << e.status();
  bool got = true;
  EXPECT_TRUE(e->EvaluateBool(slots_.data(), &got));
  EXPECT_FALSE(got);
}

struct ErrorCase {
  const char* text;
  const char* message;
  int column;  // 1-based column of the caret
};

TEST_F(ExprTest, CompileErrorsPointAtTheFault) {
  const ErrorCase cases[] = {
      {"blok_size * 2", "unknown name 'blok_size'", 1},
      {"bx * (by + 1", "missing ')'", 13},
      {"bx + ", "unexpected end of expression", 6},
      {"bx = 32", "use '==' to compare", 4},
      {"bx $ 2", "unexpected character '$'", 4},
      {"mode + 1", "cannot apply '+' to string and int", 6},
      {"mode < 'a'", "strings can only be compared with == and !=", 6},
      {"mode == 3", "cannot compare string with int", 6},
      {"f & 1", "'&' needs integers", 3},
      {"frobnicate(bx)", "unknown function 'frobnicate'", 1},
      {"ceil_div(bx)", "ceil_div() takes 2 arguments, not 1", 1},
      {"min(bx)", "min() takes at least 2 arguments", 1},
      {"ceil_div(f, 2)", "ceil_div() needs integers", 1},
      {"1 / 0", "division by zero", 3},
      {"2 ** 63", "integer overflow", 3},
      {"99999999999999999999", "does not fit in 64 bits", 1},
      {"'abc", "unterminated string", 1},
      {"bx by", "unexpected text after the expression", 4},
      {"flag ? 1 : 'x'", "different types", 6},
      {"", "unexpected end of expression", 1},
  };
  for (const ErrorCase& c : cases) {
    absl::StatusOr<Expr> e = Expr::Compile(c.text, symbols_);
    ASSERT_FALSE(e.ok()) << c.text;
    EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string msg(e.status().message());
    EXPECT_THAT(msg, HasSubstr(c.message)) << c.text;
    EXPECT_THAT(msg, HasSubstr("at column " + std::to_string(c.column))) << c.text << "\n" << msg;
    // The caret line sits under the expression.
    const std::string caret_line =
        "\n  " + std::string(static_cast<std::size_t>(c.column - 1), ' ') + "^";
    EXPECT_THAT(msg, HasSubstr(caret_line)) << c.text << "\n" << msg;
  }
}

TEST_F(ExprTest, CaretUnderlinesTheWholeName) {
  absl::StatusOr<Expr> e = Expr::Compile("bx * blok_size_y <= 1024", symbols_);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(std::string(e.status().message()),
            "unknown name 'blok_size_y' at column 6\n"
            "  bx * blok_size_y <= 1024\n"
            "       ^~~~~~~~~~~");
}

TEST_F(ExprTest, RunTimeErrorsAreReportedNotThrown) {
  absl::StatusOr<Expr> e = Expr::Compile("N / (bx - 32)", symbols_);
  ASSERT_TRUE(e.ok());
  Scalar out;
  EvalError err;
  EXPECT_FALSE(e->Evaluate(slots_.data(), &out, &err));
  EXPECT_EQ(err.kind, EvalErrorKind::kDivisionByZero);
  EXPECT_THAT(e->Describe(err), HasSubstr("division by zero at column 3"));

  absl::StatusOr<Expr> ovf = Expr::Compile("bx ** 40", symbols_);
  ASSERT_TRUE(ovf.ok());
  EXPECT_FALSE(ovf->Evaluate(slots_.data(), &out, &err));
  EXPECT_EQ(err.kind, EvalErrorKind::kOverflow);

  absl::StatusOr<Expr> neg = Expr::Compile("2 ** (by - 9)", symbols_);
  ASSERT_TRUE(neg.ok());
  EXPECT_FALSE(neg->Evaluate(slots_.data(), &out, &err));
  EXPECT_EQ(err.kind, EvalErrorKind::kNegativeExponent);
}

TEST_F(ExprTest, KnowsWhichSlotsItReads) {
  absl::StatusOr<Expr> e = Expr::Compile("by * 2 + N <= bx + by", symbols_);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->slots(), (std::vector<int>{0, 1}));
  absl::StatusOr<Expr> c = Expr::Compile("N * 2 + 1", symbols_);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->is_constant());
  Scalar out;
  ASSERT_TRUE(c->Evaluate(nullptr, &out));
  EXPECT_EQ(out.i, 2001);
}

TEST_F(ExprTest, CompileAsChecksTheResultType) {
  EXPECT_TRUE(Expr::CompileAs("bx * by <= 1024", symbols_, ValueType::kBool).ok());
  EXPECT_TRUE(Expr::CompileAs("bx % 32", symbols_, ValueType::kBool).ok());  // truthy
  EXPECT_TRUE(Expr::CompileAs("bx", symbols_, ValueType::kFloat).ok());
  absl::StatusOr<Expr> e = Expr::CompileAs("N / 3.0", symbols_, ValueType::kInt);
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(std::string(e.status().message()),
              HasSubstr("expected an int expression, got a float; use floor()"));
  EXPECT_FALSE(Expr::CompileAs("mode", symbols_, ValueType::kBool).ok());
}

TEST_F(ExprTest, DeepNestingIsAnErrorNotACrash) {
  const std::string deep = std::string(1000, '(') + "1" + std::string(1000, ')');
  absl::StatusOr<Expr> e = Expr::Compile(deep, symbols_);
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(std::string(e.status().message()), HasSubstr("nested too deeply"));
  const std::string minus = std::string(5000, '-') + "1";
  EXPECT_FALSE(Expr::Compile(minus, symbols_).ok());
}

// A long chain `1 + 1 + ...` builds a tree as deep as the chain (found by
// fuzzing: 20,000 terms overflowed the stack while compiling). Each link
// counts as a level, for every left-associative operator and for and/or.
TEST_F(ExprTest, LongChainsAreBoundedLikeNesting) {
  auto chain = [](const std::string& op, int links) {
    std::string text = "bx";
    for (int i = 0; i < links; ++i) text += " " + op + " 1";
    return text;
  };
  for (const std::string op : {"+", "*", "-", "//", "|", "&", "^", "<<", "and", "or"}) {
    EXPECT_TRUE(Expr::Compile(chain(op, 150), symbols_).ok()) << op;
    absl::StatusOr<Expr> e = Expr::Compile(chain(op, 1000), symbols_);
    ASSERT_FALSE(e.ok()) << op;
    EXPECT_THAT(std::string(e.status().message()),
                HasSubstr("nested too deeply (more than 200 levels of parentheses, calls, "
                          "operators or chained terms); split it into several"));
  }
  // A comparison chain is one flat node: long ones are fine.
  std::string compare = "0";
  for (int i = 0; i < 1000; ++i) compare += " <= bx";
  EXPECT_TRUE(Expr::Compile(compare, symbols_).ok());
  absl::StatusOr<Expr> too_long = Expr::Compile(std::string(10001, '1'), symbols_);
  ASSERT_FALSE(too_long.ok());
  EXPECT_THAT(std::string(too_long.status().message()),
              HasSubstr("expression of 10001 characters; the limit is 10000 (split it into "
                        "several)"));
}

TEST(SymbolTableTest, RejectsBadAndDuplicateNames) {
  SymbolTable t;
  EXPECT_TRUE(t.AddSlot("a", ValueType::kInt, 0).ok());
  EXPECT_FALSE(t.AddSlot("a", ValueType::kInt, 1).ok());
  EXPECT_FALSE(t.AddSlot("1a", ValueType::kInt, 1).ok());
  EXPECT_FALSE(t.AddSlot("and", ValueType::kInt, 1).ok());
  EXPECT_FALSE(t.AddSlot("a-b", ValueType::kInt, 1).ok());
  EXPECT_EQ(t.Intern("x"), t.Intern("x"));
  EXPECT_NE(t.Intern("x"), t.Intern("y"));
}

TEST(ExprCopyTest, CopiesShareCodeAndEvaluateAlike) {
  SymbolTable t;
  ASSERT_TRUE(t.AddSlot("a", ValueType::kInt, 0).ok());
  absl::StatusOr<Expr> e = Expr::Compile("a * 3", t);
  ASSERT_TRUE(e.ok());
  const Expr copy = *e;
  const Expr moved = std::move(*e);
  const Scalar slot = IntScalar(5);
  std::int64_t x = 0, y = 0;
  ASSERT_TRUE(copy.EvaluateInt(&slot, &x));
  ASSERT_TRUE(moved.EvaluateInt(&slot, &y));
  EXPECT_EQ(x, 15);
  EXPECT_EQ(y, 15);
  static_assert(std::is_nothrow_move_constructible_v<Expr>);
}

}  // namespace
}  // namespace ktune
