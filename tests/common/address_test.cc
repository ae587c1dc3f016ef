#include "server/common/address.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace ktune {
namespace {

using ::testing::HasSubstr;

TEST(ServerAddressTest, APortIsADecimalNumberUpTo65535) {
  EXPECT_EQ(PortNumber("0"), 0);
  EXPECT_EQ(PortNumber("7070"), 7070);
  EXPECT_EQ(PortNumber("0007070"), 7070);
  EXPECT_EQ(PortNumber("65535"), 65535);
  for (const char* bad : {"", "65536", "99999999999999999999", "-1", "+1", "70 ", "7a", "0x10"}) {
    EXPECT_EQ(PortNumber(bad), std::nullopt) << bad;
  }
}

TEST(ServerAddressTest, TakesWhatGrpcDials) {
  for (const char* ok : {"localhost:7070", "127.0.0.1:1", "gpu7.example:65535", "[::1]:7070",
                         "dns:///gpu7:7070", "ipv4:10.0.0.1:7070", "unix:/run/ktune.sock",
                         "unix:/tmp/a:99999", "unix-abstract:ktune:0", "localhost", "[::1]"}) {
    EXPECT_TRUE(CheckServerAddress(ok).ok()) << ok << ": " << CheckServerAddress(ok);
  }
}

TEST(ServerAddressTest, RefusesAPortGrpcWouldWrapOrCannotDial) {
  for (const char* bad : {"127.0.0.1:99999", "localhost:65536", "[::1]:70000", "dns:///h:0",
                          "h:00000", "h:123456789012345678901234567890"}) {
    const absl::Status s = CheckServerAddress(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(s.message(), HasSubstr(bad));
    EXPECT_THAT(s.message(), HasSubstr("give one in [1, 65535]"));
  }
  EXPECT_EQ(CheckServerAddress("").message(), "empty address");
  EXPECT_TRUE(CheckServerAddress("h:065535").ok());
}

}  // namespace
}  // namespace ktune
