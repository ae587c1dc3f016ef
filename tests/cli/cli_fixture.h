// What the command line's tests share: the ktune binary run as a user runs
// it (KTUNE_CLI, else the one built beside the tests), in a folder of its
// own, and the recorded spaces of kernels/recorded/.
#ifndef KTUNE_TESTS_CLI_CLI_FIXTURE_H_
#define KTUNE_TESTS_CLI_CLI_FIXTURE_H_

#include <gtest/gtest.h>
#include <sys/types.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "tests/testing/process.h"
#include "tests/testing/temp_dir.h"
#include "tuner/base/json.h"

namespace ktune {

inline const std::string kRecorded = std::string(KTUNE_SOURCE_DIR) + "/kernels/recorded/";

inline std::string Cli() {
  const char* p = std::getenv("KTUNE_CLI");
  return p != nullptr ? p : KTUNE_CLI_PATH;
}

struct RunResult {
  int code = -1;
  std::string out;
  std::string err;
};

class CliTest : public ::testing::Test {
 protected:
  pid_t Start(const std::vector<std::string>& args) {
    return testing::Spawn(Cli(), args, dir_ + "/stdout", dir_ + "/stderr");
  }

  RunResult Finish(pid_t pid) {
    RunResult r;
    r.code = testing::WaitExit(pid);
    r.out = testing::Slurp(dir_ + "/stdout");
    r.err = testing::Slurp(dir_ + "/stderr");
    return r;
  }

  RunResult Run(const std::vector<std::string>& args) { return Finish(Start(args)); }

  Json RunJson(const std::vector<std::string>& args) {
    const RunResult r = Run(args);
    EXPECT_EQ(r.code, 0) << r.err;
    absl::StatusOr<Json> j = ParseJson(r.out);
    EXPECT_TRUE(j.ok()) << r.out;
    return j.ok() ? *j : Json();
  }

  std::string Db(const std::string& name = "k.db") { return dir_ + "/" + name; }

  testing::TempDir tmp_;
  const std::string& dir_ = tmp_.path();
};

}  // namespace ktune

#endif  // KTUNE_TESTS_CLI_CLI_FIXTURE_H_
