// SHA-256 (FIPS 180-4), for content identities: kernel sources, job specs,
// compiled images, recorded files. Computed by OpenSSL's libcrypto.
#ifndef KTUNE_TUNER_BASE_SHA256_H_
#define KTUNE_TUNER_BASE_SHA256_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

struct evp_md_ctx_st;  // OpenSSL's EVP_MD_CTX

namespace ktune {

// Incremental hasher. Move-only; not thread-safe.
class Sha256 {
 public:
  Sha256();
  void Update(std::string_view bytes);
  // Returns the digest. The hasher must not be updated afterwards.
  std::array<std::uint8_t, 32> Finish();
  // Finish() as lower-case hex.
  std::string FinishHex();

 private:
  struct Free {
    void operator()(evp_md_ctx_st* ctx) const;
  };
  std::unique_ptr<evp_md_ctx_st, Free> ctx_;
};

// Lower-case hex digest of `bytes`.
std::string Sha256Hex(std::string_view bytes);

}  // namespace ktune

#endif  // KTUNE_TUNER_BASE_SHA256_H_
