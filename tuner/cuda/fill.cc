#include "tuner/cuda/fill.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "tuner/base/strings.h"

namespace ktune {

std::size_t ElementBytes(v1::ElementType type) {
  switch (type) {
    case v1::ELEMENT_F16:
    case v1::ELEMENT_BF16:
    case v1::ELEMENT_I16:
    case v1::ELEMENT_U16: return 2;
    case v1::ELEMENT_F32:
    case v1::ELEMENT_I32:
    case v1::ELEMENT_U32: return 4;
    case v1::ELEMENT_F64:
    case v1::ELEMENT_I64:
    case v1::ELEMENT_U64: return 8;
    case v1::ELEMENT_I8:
    case v1::ELEMENT_U8: return 1;
    default: return 0;
  }
}

const char* ElementName(v1::ElementType type) {
  switch (type) {
    case v1::ELEMENT_F16: return "f16";
    case v1::ELEMENT_BF16: return "bf16";
    case v1::ELEMENT_F32: return "f32";
    case v1::ELEMENT_F64: return "f64";
    case v1::ELEMENT_I8: return "i8";
    case v1::ELEMENT_I16: return "i16";
    case v1::ELEMENT_I32: return "i32";
    case v1::ELEMENT_I64: return "i64";
    case v1::ELEMENT_U8: return "u8";
    case v1::ELEMENT_U16: return "u16";
    case v1::ELEMENT_U32: return "u32";
    case v1::ELEMENT_U64: return "u64";
    default: return "?";
  }
}

std::uint16_t FloatToHalf(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or nan
    return static_cast<std::uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  }
  if (abs >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // overflow
  if (abs < 0x38800000u) {  // subnormal or zero in half
    if (abs < 0x33000000u) return static_cast<std::uint16_t>(sign);
    // value = mant * 2^(e - 150); in units of 2^-24 that is mant >> (126 - e).
    const std::uint32_t shift = 126 - (abs >> 23);
    const std::uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    std::uint32_t h = mant >> shift;
    const std::uint32_t rem = mant & ((1u << shift) - 1);
    const std::uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1u))) ++h;
    return static_cast<std::uint16_t>(sign | h);
  }
  std::uint32_t h = ((abs - 0x38000000u) >> 13);
  const std::uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<std::uint16_t>(sign | h);
}

std::uint16_t FloatToBfloat16(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);
  const std::uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<std::uint16_t>((x + rounding) >> 16);
}

float HalfToFloat(std::uint16_t h) {
  const std::uint32_t sign = (h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t mant = h & 0x3ffu;
  float f;
  if (exp == 0) {
    f = std::ldexp(static_cast<float>(mant), -24);
  } else if (exp == 31) {
    f = mant != 0 ? std::nanf("") : INFINITY;
  } else {
    f = std::ldexp(static_cast<float>(mant | 0x400u), static_cast<int>(exp) - 25);
  }
  return sign != 0 ? -f : f;
}

float Bfloat16ToFloat(std::uint16_t b) {
  const std::uint32_t x = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

namespace {

template <typename T>
void Store(void* out, std::size_t i, T v) {
  std::memcpy(static_cast<char*>(out) + i * sizeof(T), &v, sizeof(T));
}

void StoreAs(v1::ElementType type, void* out, std::size_t i, double v) {
  switch (type) {
    case v1::ELEMENT_F16: Store(out, i, FloatToHalf(static_cast<float>(v))); break;
    case v1::ELEMENT_BF16: Store(out, i, FloatToBfloat16(static_cast<float>(v))); break;
    case v1::ELEMENT_F32: Store(out, i, static_cast<float>(v)); break;
    case v1::ELEMENT_F64: Store(out, i, v); break;
    case v1::ELEMENT_I8: Store(out, i, static_cast<std::int8_t>(std::floor(v))); break;
    case v1::ELEMENT_I16: Store(out, i, static_cast<std::int16_t>(std::floor(v))); break;
    case v1::ELEMENT_I32: Store(out, i, static_cast<std::int32_t>(std::floor(v))); break;
    case v1::ELEMENT_I64: Store(out, i, static_cast<std::int64_t>(std::floor(v))); break;
    case v1::ELEMENT_U8: Store(out, i, static_cast<std::uint8_t>(std::floor(v))); break;
    case v1::ELEMENT_U16: Store(out, i, static_cast<std::uint16_t>(std::floor(v))); break;
    case v1::ELEMENT_U32: Store(out, i, static_cast<std::uint32_t>(std::floor(v))); break;
    case v1::ELEMENT_U64: Store(out, i, static_cast<std::uint64_t>(std::floor(v))); break;
    default: break;
  }
}

// A uniform double in [0, 1) from (seed, index): splitmix64 of both.
double HashUniform(std::uint64_t seed, std::uint64_t index) {
  std::uint64_t z = seed + 0x9e3779b97f4a7c15ULL * (index + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

void FillSerial(const v1::WorkerBuffer& buffer, std::uint64_t first, std::uint64_t count,
                void* out) {
  const v1::ElementType type = buffer.type();
  switch (buffer.init_case()) {
    case v1::WorkerBuffer::kUniform: {
      const std::uint64_t seed = buffer.uniform().seed();
      const double lo = buffer.uniform().low(), span = buffer.uniform().high() - lo;
      for (std::uint64_t k = 0; k < count; ++k) {
        StoreAs(type, out, k, lo + span * HashUniform(seed, first + k));
      }
      return;
    }
    case v1::WorkerBuffer::kNormal: {
      // Box-Muller on the pair (2j, 2j+1): element 2j takes the cosine,
      // 2j+1 the sine.
      const std::uint64_t seed = buffer.normal().seed();
      const double mean = buffer.normal().low(), dev = buffer.normal().high();
      for (std::uint64_t k = 0; k < count; ++k) {
        const std::uint64_t i = first + k, j = i / 2;
        const double u1 = 1.0 - HashUniform(seed, 2 * j);
        const double u2 = HashUniform(seed, 2 * j + 1);
        const double r = std::sqrt(-2.0 * std::log(u1));
        const double angle = 2 * M_PI * u2;
        StoreAs(type, out, k, mean + dev * r * (i % 2 == 0 ? std::cos(angle) : std::sin(angle)));
      }
      return;
    }
    case v1::WorkerBuffer::kConstant:
      for (std::uint64_t k = 0; k < count; ++k) StoreAs(type, out, k, buffer.constant());
      return;
    case v1::WorkerBuffer::kIota:
      for (std::uint64_t k = 0; k < count; ++k) {
        StoreAs(type, out, k,
                buffer.iota().start() + buffer.iota().step() * static_cast<double>(first + k));
      }
      return;
    case v1::WorkerBuffer::kData: {
      const std::size_t eb = ElementBytes(type);
      std::memcpy(out, buffer.data().data() + first * eb, count * eb);
      return;
    }
    case v1::WorkerBuffer::kZeros:
    case v1::WorkerBuffer::INIT_NOT_SET: std::memset(out, 0, count * ElementBytes(type)); return;
  }
}

}  // namespace

absl::Status FillRange(const v1::WorkerBuffer& buffer, std::int64_t first, std::int64_t count,
                       void* out, int threads) {
  const std::size_t eb = ElementBytes(buffer.type());
  if (eb == 0) return absl::InvalidArgumentError(StrCat("argument ", buffer.name(), ": no type"));
  if (first < 0 || count < 0 || first + count > buffer.elements()) {
    return absl::OutOfRangeError(StrCat("argument ", buffer.name(), ": fill range out of bounds"));
  }
  if (buffer.init_case() == v1::WorkerBuffer::kData &&
      buffer.data().size() != static_cast<std::size_t>(buffer.elements()) * eb) {
    return absl::InvalidArgumentError(
        StrCat("argument ", buffer.name(), ": the data has ", buffer.data().size(),
               " bytes, the buffer ", static_cast<std::size_t>(buffer.elements()) * eb, " (",
               buffer.elements(), " ", ElementName(buffer.type()), ")"));
  }
  constexpr std::int64_t kPerThread = 1 << 20;
  const int n = static_cast<int>(std::clamp<std::int64_t>(count / kPerThread, 1, threads));
  if (n <= 1) {
    FillSerial(buffer, static_cast<std::uint64_t>(first), static_cast<std::uint64_t>(count), out);
    return absl::OkStatus();
  }
  std::vector<std::thread> pool;
  const std::int64_t step = (count + n - 1) / n;
  for (int t = 0; t < n; ++t) {
    const std::int64_t lo = t * step, hi = std::min(count, lo + step);
    if (lo >= hi) break;
    pool.emplace_back([&buffer, first, lo, hi, out, eb] {
      FillSerial(buffer, static_cast<std::uint64_t>(first + lo),
                 static_cast<std::uint64_t>(hi - lo), static_cast<char*>(out) + lo * eb);
    });
  }
  for (std::thread& t : pool) t.join();
  return absl::OkStatus();
}

absl::Status FillBuffer(const v1::WorkerBuffer& buffer, void* out) {
  return FillRange(buffer, 0, buffer.elements(), out, 1);
}

double ElementAsDouble(v1::ElementType type, const void* data, std::size_t i) {
  const char* p = static_cast<const char*>(data) + i * ElementBytes(type);
  auto load = [&](auto v) {
    std::memcpy(&v, p, sizeof v);
    return v;
  };
  switch (type) {
    case v1::ELEMENT_F16: return HalfToFloat(load(std::uint16_t{}));
    case v1::ELEMENT_BF16: return Bfloat16ToFloat(load(std::uint16_t{}));
    case v1::ELEMENT_F32: return load(float{});
    case v1::ELEMENT_F64: return load(double{});
    case v1::ELEMENT_I8: return load(std::int8_t{});
    case v1::ELEMENT_I16: return load(std::int16_t{});
    case v1::ELEMENT_I32: return load(std::int32_t{});
    case v1::ELEMENT_I64: return static_cast<double>(load(std::int64_t{}));
    case v1::ELEMENT_U8: return load(std::uint8_t{});
    case v1::ELEMENT_U16: return load(std::uint16_t{});
    case v1::ELEMENT_U32: return load(std::uint32_t{});
    case v1::ELEMENT_U64: return static_cast<double>(load(std::uint64_t{}));
    default: return 0;
  }
}

}  // namespace ktune
