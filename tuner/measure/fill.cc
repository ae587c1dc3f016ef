#include "tuner/measure/fill.h"

#include <cmath>
#include <cstring>

#include "tuner/base/rng.h"
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

}  // namespace

absl::Status FillBuffer(const v1::WorkerBuffer& buffer, void* out) {
  const auto n = static_cast<std::size_t>(buffer.elements());
  const v1::ElementType type = buffer.type();
  const std::size_t bytes = n * ElementBytes(type);
  switch (buffer.init_case()) {
    case v1::WorkerBuffer::kUniform: {
      Rng rng(buffer.uniform().seed());
      const double lo = buffer.uniform().low(), span = buffer.uniform().high() - lo;
      for (std::size_t i = 0; i < n; ++i) StoreAs(type, out, i, lo + span * rng.UniformDouble());
      return absl::OkStatus();
    }
    case v1::WorkerBuffer::kNormal: {
      Rng rng(buffer.normal().seed());
      const double mean = buffer.normal().low(), dev = buffer.normal().high();
      for (std::size_t i = 0; i < n; i += 2) {
        // Box-Muller: two values from two uniforms.
        const double u1 = 1.0 - rng.UniformDouble();
        const double u2 = rng.UniformDouble();
        const double r = std::sqrt(-2.0 * std::log(u1));
        StoreAs(type, out, i, mean + dev * r * std::cos(2 * M_PI * u2));
        if (i + 1 < n) StoreAs(type, out, i + 1, mean + dev * r * std::sin(2 * M_PI * u2));
      }
      return absl::OkStatus();
    }
    case v1::WorkerBuffer::kConstant:
      for (std::size_t i = 0; i < n; ++i) StoreAs(type, out, i, buffer.constant());
      return absl::OkStatus();
    case v1::WorkerBuffer::kIota:
      for (std::size_t i = 0; i < n; ++i) {
        StoreAs(type, out, i,
                buffer.iota().start() + buffer.iota().step() * static_cast<double>(i));
      }
      return absl::OkStatus();
    case v1::WorkerBuffer::kData:
      if (buffer.data().size() != bytes) {
        return absl::InvalidArgumentError(StrCat("argument ", buffer.name(), ": the data has ",
                                                 buffer.data().size(), " bytes, the buffer ", bytes,
                                                 " (", n, " ", ElementName(type), ")"));
      }
      std::memcpy(out, buffer.data().data(), bytes);
      return absl::OkStatus();
    case v1::WorkerBuffer::kZeros:
    case v1::WorkerBuffer::INIT_NOT_SET: std::memset(out, 0, bytes); return absl::OkStatus();
  }
  return absl::OkStatus();
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
