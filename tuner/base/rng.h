// A small, fast, portable pseudo-random generator (xoshiro256**, seeded by
// splitmix64). Unlike the standard distributions, every method here gives
// the same sequence on every platform and standard library, which keeps
// seeded tuning runs reproducible everywhere.
#ifndef KTUNE_TUNER_BASE_RNG_H_
#define KTUNE_TUNER_BASE_RNG_H_

#include <cstdint>

namespace ktune {

// 128-bit unsigned integer (a GCC/Clang extension; __extension__ keeps
// -Wpedantic quiet).
__extension__ typedef unsigned __int128 Uint128;

// Value type; not thread-safe.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) {
    for (auto& s : state_) s = SplitMix(seed);
  }

  std::uint64_t Next() {
    const std::uint64_t result = Rotl(state_[1] * 5, 7) * 9;
    const std::uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = Rotl(state_[3], 45);
    return result;
  }

  // Uniform in [0, n). REQUIRES: n > 0. Unbiased (Lemire's method).
  std::uint64_t Uniform(std::uint64_t n) {
    Uint128 m = static_cast<Uint128>(Next()) * n;
    auto low = static_cast<std::uint64_t>(m);
    if (low < n) {
      const std::uint64_t threshold = -n % n;
      while (low < threshold) {
        m = static_cast<Uint128>(Next()) * n;
        low = static_cast<std::uint64_t>(m);
      }
    }
    return static_cast<std::uint64_t>(m >> 64);
  }

  // Uniform in [0, n) for 128-bit n. REQUIRES: n > 0.
  Uint128 Uniform128(Uint128 n) {
    if (n <= UINT64_MAX) return Uniform(static_cast<std::uint64_t>(n));
    // Rejection over the smallest power-of-two range covering n.
    int bits = 0;
    for (Uint128 v = n - 1; v != 0; v >>= 1) ++bits;
    const Uint128 mask =
        bits >= 128 ? ~static_cast<Uint128>(0) : (static_cast<Uint128>(1) << bits) - 1;
    while (true) {
      const Uint128 v = ((static_cast<Uint128>(Next()) << 64) | Next()) & mask;
      if (v < n) return v;
    }
  }

  // Uniform in [0, 1) with 53 random bits.
  double UniformDouble() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

 private:
  static std::uint64_t Rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  static std::uint64_t SplitMix(std::uint64_t& x) {
    std::uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

  std::uint64_t state_[4];
};

}  // namespace ktune

#endif  // KTUNE_TUNER_BASE_RNG_H_
