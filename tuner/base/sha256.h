// SHA-256 (FIPS 180-4), for content identities: kernel sources, job specs,
// compiled images, recorded files.
#ifndef KTUNE_TUNER_BASE_SHA256_H_
#define KTUNE_TUNER_BASE_SHA256_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace ktune {

// Incremental hasher. Value type; not thread-safe.
class Sha256 {
 public:
  Sha256();
  void Update(std::string_view bytes);
  // Returns the digest. The hasher must not be updated afterwards.
  std::array<std::uint8_t, 32> Finish();

 private:
  void Block(const std::uint8_t* p);

  std::array<std::uint32_t, 8> h_;
  std::array<std::uint8_t, 64> buffer_{};
  std::size_t buffered_ = 0;
  std::uint64_t total_bytes_ = 0;
};

// Lower-case hex digest of `bytes`.
std::string Sha256Hex(std::string_view bytes);

}  // namespace ktune

#endif  // KTUNE_TUNER_BASE_SHA256_H_
