#include "server/common/flags.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

namespace ktune::flags {
namespace {

using ::testing::HasSubstr;

const CommandSpec kSpec{"tune",
                        "ktune tune [SPEC.json] [flags]",
                        "Tunes a kernel.",
                        {{"device", "DEVICE", "the device"},
                         {"json", "", "print JSON"},
                         {"a-flag-whose-name-is-long", "VALUE", "still aligned"}},
                        1};

// Every help text starts in one column, -h's included; a flag too long
// for it has its help on the next line, in that column.
TEST(FlagsTest, HelpIsAligned) {
  std::istringstream text(HelpText(kSpec));
  std::string line;
  std::vector<std::size_t> columns;
  bool in_flags = false;
  while (std::getline(text, line)) {
    if (line == "Flags:") {
      in_flags = true;
    } else if (in_flags) {
      // "  --flag META   help", "  --long-flag META" alone, or "      help".
      const std::size_t start = line.find_first_not_of(' ');
      const std::size_t gap = line.rfind("  ");
      if (line.compare(start, 1, "-") != 0) {
        columns.push_back(start);
      } else if (gap != std::string::npos && gap > start) {
        columns.push_back(line.find_first_not_of(' ', gap));
      }
    }
  }
  ASSERT_EQ(columns.size(), 4u) << HelpText(kSpec);  // three flags and -h
  for (std::size_t c : columns) EXPECT_EQ(c, columns.front()) << HelpText(kSpec);
}

TEST(FlagsTest, ErrorsNameTheFlag) {
  absl::StatusOr<Args> unknown = Parse(kSpec, {"--devise", "0"});
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(std::string(unknown.status().message()), HasSubstr("--devise"));
  absl::StatusOr<Args> missing = Parse(kSpec, {"--device"});
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("--device"));
  absl::StatusOr<Args> extra = Parse(kSpec, {"a.json", "b.json"});
  EXPECT_FALSE(extra.ok());
}

}  // namespace
}  // namespace ktune::flags
