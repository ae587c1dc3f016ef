#include "tuner/base/sha256.h"

#include <gtest/gtest.h>

#include <array>
#include <string>
#include <utility>

namespace ktune {
namespace {

// FIPS 180-4 example vectors.
TEST(Sha256Test, KnownVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(Sha256Hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256Test, IncrementalEqualsOneShot) {
  const std::string text(1000, 'x');
  for (std::size_t split : {0u, 1u, 63u, 64u, 65u, 500u, 999u}) {
    Sha256 h;
    h.Update(std::string_view(text).substr(0, split));
    h.Update(std::string_view(text).substr(split));
    EXPECT_EQ(h.FinishHex(), Sha256Hex(text)) << split;
  }
}

TEST(Sha256Test, FinishReturnsTheDigestsBytes) {
  Sha256 h;
  h.Update("abc");
  const std::array<std::uint8_t, 32> digest = h.Finish();
  EXPECT_EQ(digest[0], 0xba);
  EXPECT_EQ(digest[31], 0xad);
}

// A hasher moved from carries its state: what was hashed before the move
// counts.
TEST(Sha256Test, AMovedHasherKeepsItsState) {
  Sha256 a;
  a.Update("ab");
  Sha256 b = std::move(a);
  b.Update("c");
  EXPECT_EQ(b.FinishHex(), Sha256Hex("abc"));
}

}  // namespace
}  // namespace ktune
