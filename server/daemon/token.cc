#include "server/daemon/token.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <array>

namespace ktune {
namespace {

std::array<unsigned char, SHA256_DIGEST_LENGTH> Digest(std::string_view bytes) {
  std::array<unsigned char, SHA256_DIGEST_LENGTH> out;
  SHA256(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), out.data());
  return out;
}

}  // namespace

bool TokenMatches(std::string_view presented, const std::string& token) {
  const auto want = Digest(token);
  const auto got = Digest(presented);
  return CRYPTO_memcmp(want.data(), got.data(), want.size()) == 0;
}

bool BearerMatches(std::string_view header, const std::string& token) {
  constexpr std::string_view kScheme = "Bearer ";
  // The scheme is not secret: only the token is compared in constant time.
  if (header.substr(0, kScheme.size()) != kScheme) return false;
  return TokenMatches(header.substr(kScheme.size()), token);
}

}  // namespace ktune
