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
  for (const char* ok :
       {"localhost:7070", "127.0.0.1:1", "gpu7.example:65535", "[::1]:7070", "[fe80::1%eth0]:7070",
        "dns:///gpu7:7070", "dns:///gpu7", "dns://8.8.8.8/gpu7:7070", "ipv4:10.0.0.1:7070",
        "ipv4:10.0.0.1:7070,10.0.0.2:7070", "ipv6:[::1]:7070", "unix:/run/ktune.sock",
        "unix:/tmp/a:99999", "unix-abstract:ktune:0", "vsock:3:7070"}) {
    EXPECT_TRUE(CheckServerAddress(ok).ok()) << ok << ": " << CheckServerAddress(ok);
  }
}

// What gRPC would dial somewhere else than meant (port 443 or 0, or an
// IPv6 address read in pieces), or fail on with a resolver's message.
TEST(ServerAddressTest, NamesWhatAHostAndPortLack) {
  const struct {
    const char* address;
    const char* says;
  } cases[] = {
      {"localhost", "localhost: no port; give HOST:PORT"},
      {"gpu7.example:", "gpu7.example:: no port"},
      {"[::1]", "[::1]: no port"},
      {"::1", "::1: an IPv6 address goes in brackets, [ADDRESS]:PORT"},
      {"fe80::1:7070", "an IPv6 address goes in brackets"},
      {"[::1:7070", "[::1:7070: no closing ']'"},
      {"[]:7070", "[]:7070: no address in the brackets"},
      {"[::1]7070", "after [ADDRESS] comes :PORT and nothing else"},
      {"[::1]:70:70", "after [ADDRESS] comes :PORT and nothing else"},
      {"::1]:7070", "an IPv6 address goes in brackets"},
      {":7070", ":7070: no host"},
      {"h:-1", "h:-1: port -1 is not a port"},
      {"h:+80", "port +80 is not a port"},
      {"h: 80", "port  80 is not a port"},
      {"h:80 ", "port 80  is not a port"},
      {"h:http", "port http is not a port"},
  };
  for (const auto& c : cases) {
    const absl::Status s = CheckServerAddress(c.address);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.address;
    EXPECT_THAT(s.message(), HasSubstr(c.says)) << c.address;
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
  EXPECT_THAT(CheckServerAddress("").message(), HasSubstr("empty address; give HOST:PORT"));
  EXPECT_TRUE(CheckServerAddress("h:065535").ok());
}

}  // namespace
}  // namespace ktune
