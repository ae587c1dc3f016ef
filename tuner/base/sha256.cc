#include "tuner/base/sha256.h"

#include <openssl/evp.h>

#include <cstdio>
#include <cstdlib>

#include "absl/strings/escaping.h"

namespace ktune {
namespace {

// libcrypto fails here only without memory or with a broken installation
// (no SHA-256 provider): no identity can be computed, so nothing can go on.
void Check(int ok, const char* call) {
  if (ok == 1) return;
  std::fprintf(stderr, "ktune: fatal: OpenSSL %s failed for SHA-256\n", call);
  std::abort();
}

}  // namespace

void Sha256::Free::operator()(evp_md_ctx_st* ctx) const { EVP_MD_CTX_free(ctx); }

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  Check(ctx_ != nullptr ? 1 : 0, "EVP_MD_CTX_new");
  Check(EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr), "EVP_DigestInit_ex");
}

void Sha256::Update(std::string_view bytes) {
  Check(EVP_DigestUpdate(ctx_.get(), bytes.data(), bytes.size()), "EVP_DigestUpdate");
}

std::array<std::uint8_t, 32> Sha256::Finish() {
  std::array<std::uint8_t, 32> out{};
  unsigned int size = 0;
  Check(EVP_DigestFinal_ex(ctx_.get(), out.data(), &size), "EVP_DigestFinal_ex");
  Check(size == out.size() ? 1 : 0, "EVP_DigestFinal_ex (digest size)");
  return out;
}

std::string Sha256::FinishHex() {
  const std::array<std::uint8_t, 32> digest = Finish();
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(digest.data()), digest.size()));
}

std::string Sha256Hex(std::string_view bytes) {
  Sha256 h;
  h.Update(bytes);
  return h.FinishHex();
}

}  // namespace ktune
