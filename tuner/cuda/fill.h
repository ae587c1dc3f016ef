// Host-side argument contents: element sizes, seeded fills, conversions to
// the narrow float formats. Deterministic on every platform.
#ifndef KTUNE_TUNER_CUDA_FILL_H_
#define KTUNE_TUNER_CUDA_FILL_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "ktune/v1/worker.pb.h"

namespace ktune {

// Bytes per element; 0 for an unknown type.
std::size_t ElementBytes(v1::ElementType type);
// "f32", "i64", ...
const char* ElementName(v1::ElementType type);

// IEEE binary16 and bfloat16 from float, rounding to nearest even.
std::uint16_t FloatToHalf(float f);
std::uint16_t FloatToBfloat16(float f);
float HalfToFloat(std::uint16_t h);
float Bfloat16ToFloat(std::uint16_t b);

// Fills `out` (buffer.elements() elements of buffer.type()) as the buffer's
// init asks. INVALID_ARGUMENT for data of the wrong size. Random values are
// a function of (seed, element index) alone, so any range can be filled on
// its own and the result does not depend on how the work is split.
absl::Status FillBuffer(const v1::WorkerBuffer& buffer, void* out);

// Fills elements [first, first + count) of the buffer into `out` (which
// receives only those elements), using up to `threads` threads.
absl::Status FillRange(const v1::WorkerBuffer& buffer, std::int64_t first, std::int64_t count,
                       void* out, int threads = 1);

// Element `i` of `data` (of `type`) as a double, for messages.
double ElementAsDouble(v1::ElementType type, const void* data, std::size_t i);

}  // namespace ktune

#endif  // KTUNE_TUNER_CUDA_FILL_H_
