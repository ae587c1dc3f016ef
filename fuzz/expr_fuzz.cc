// The expression language: any text is compiled against a table of int,
// float, bool and string names and, when it compiles, evaluated over
// values taken from the input's last bytes.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "tuner/expr/expr.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace ktune;
  // The last 16 bytes (when there are more than 16) are the slots' values.
  std::int64_t a = 3;
  double x = 0.5;
  if (size > 16) {
    std::memcpy(&a, data + size - 16, sizeof a);
    std::memcpy(&x, data + size - 8, sizeof x);
    size -= 16;
  }
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  SymbolTable symbols;
  (void)symbols.AddSlot("a", ValueType::kInt, 0);
  (void)symbols.AddSlot("x", ValueType::kFloat, 1);
  (void)symbols.AddSlot("flag", ValueType::kBool, 2);
  (void)symbols.AddSlot("mode", ValueType::kString, 3);
  (void)symbols.AddConstant("N", ValueType::kInt, IntScalar(4096));
  const std::int64_t mode = symbols.Intern("fast");
  absl::StatusOr<Expr> e = Expr::Compile(text, symbols);
  if (!e.ok()) return 0;
  const Scalar slots[4] = {IntScalar(a), FloatScalar(x), IntScalar(a & 1), IntScalar(mode)};
  Scalar out;
  EvalError error;
  (void)e->Evaluate(slots, &out, &error);
  double d = 0;
  (void)e->EvaluateDouble(slots, &d);
  return 0;
}
