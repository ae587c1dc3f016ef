// Host-side argument contents: element sizes, seeded fills, conversions to
// the narrow float formats. Deterministic on every platform.
#ifndef KTUNE_TUNER_MEASURE_FILL_H_
#define KTUNE_TUNER_MEASURE_FILL_H_

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
// init asks. INVALID_ARGUMENT for data of the wrong size.
absl::Status FillBuffer(const v1::WorkerBuffer& buffer, void* out);

// Element `i` of `data` (of `type`) as a double, for messages.
double ElementAsDouble(v1::ElementType type, const void* data, std::size_t i);

}  // namespace ktune

#endif  // KTUNE_TUNER_MEASURE_FILL_H_
