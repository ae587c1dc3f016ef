// End-to-end tests of the ktune command line: the binary is run as a user
// would run it.
#include <dirent.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tests/cli/cli_fixture.h"
#include "tests/testing/latch_device.h"
#include "tests/testing/process.h"
#include "tests/testing/temp_dir.h"
#include "tuner/base/json.h"
#include "tuner/base/strings.h"
#include "tuner/store/sqlite.h"
#include "tuner/store/store.h"

namespace ktune {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::Slurp;

TEST_F(CliTest, BruteForceReportsTheRecordedOptimum) {
  const struct {
    const char* file;
    const char* key;
    double time_ms;
    int evaluations;
  } cases[] = {
      {"pnpoly_kttvalues_RTX_2080_Ti.json.gz", "0,128,20,2", 8.023776, 4092},
      {"convolution_milo_A100.json.gz", "32,4,1,3,1,0,1,1,15,15", 0.5536000076681375, 4362},
      {"convolution_milo_A100_T4.json.gz", "32,4,1,3,1,0,1,1,15,15", 0.5536000076681375, 4362},
  };
  for (const auto& c : cases) {
    const Json j = RunJson({"tune", "--local", "--device", "sim:" + kRecorded + c.file,
                            "--strategy", "brute_force", "--db", Db(), "--json"});
    ASSERT_TRUE(j.is_object()) << c.file;
    EXPECT_EQ(j.Find("best")->Find("key")->as_string(), c.key) << c.file;
    EXPECT_DOUBLE_EQ(j.Find("best")->Find("time_ms")->as_double(), c.time_ms) << c.file;
    EXPECT_EQ(j.Find("evaluations")->as_int(), c.evaluations) << c.file;
    EXPECT_EQ(j.Find("strategy")->as_string(), "brute_force");
    EXPECT_EQ(j.Find("job_id")->as_string().size(), 16u);
    EXPECT_TRUE(j.Find("best")->Find("config")->is_object());
    EXPECT_GT(j.Find("status_counts")->Find("ok")->as_int(), 0);
  }
  // The three jobs are stored; the best query answers from the store.
  const Json best = RunJson({"best", "--db", Db(), "--kernel", "cn_pnpoly", "--json"});
  ASSERT_EQ(best.Find("results")->as_array().size(), 1u);
  EXPECT_EQ(best.Find("results")->as_array()[0].Find("key")->as_string(), "0,128,20,2");
  EXPECT_EQ(best.Find("results")->as_array()[0].Find("problem")->Dump(),
            R"({"problem_size_x":20000000})");
  const Json filtered =
      RunJson({"best", "--db", Db(), "--kernel", "cn_pnpoly", "--device",
               "NVIDIA GeForce RTX 2080 Ti", "--problem", "problem_size_x=20000000", "--json"});
  EXPECT_EQ(filtered.Find("results")->as_array().size(), 1u);
  const RunResult none = Run(
      {"best", "--db", Db(), "--kernel", "cn_pnpoly", "--problem", "problem_size_x=5", "--exact"});
  EXPECT_EQ(none.code, 1);
  EXPECT_THAT(none.err, HasSubstr("no stored best configuration for kernel cn_pnpoly"));
  // Without --exact, the nearest problem answers, and says so.
  const Json nearest = RunJson(
      {"best", "--db", Db(), "--kernel", "cn_pnpoly", "--problem", "problem_size_x=5", "--json"});
  ASSERT_EQ(nearest.Find("results")->as_array().size(), 1u);
  EXPECT_EQ(nearest.Find("results")->as_array()[0].Find("match")->as_string(), "nearest_problem");
  EXPECT_EQ(nearest.Find("results")->as_array()[0].Find("key")->as_string(), "0,128,20,2");
  const RunResult other = Run({"best", "--db", Db(), "--kernel", "cn_pnpoly", "--problem",
                               "size=5"});  // other dimensions: nothing is near
  EXPECT_EQ(other.code, 1);
  EXPECT_THAT(other.err, HasSubstr("no stored best configuration for kernel cn_pnpoly"));
  const Json jobs = RunJson({"jobs", "--db", Db(), "--json"});
  EXPECT_EQ(jobs.Find("jobs")->as_array().size(), 3u);
}

// Every complete recorded space of the developer set (when present).
TEST_F(CliTest, SharedCachesReplayToTheirRecordedOptimum) {
  const std::string dir = KTUNE_SHARED_CACHES;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) GTEST_SKIP() << dir << " is not here";
  std::vector<std::string> files;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() > 8 && name.substr(name.size() - 8) == ".json.gz" &&
        name.find("PARTIAL") == std::string::npos) {
      files.push_back(name);
    }
  }
  closedir(d);
  // Optima as published with the files (README of the set).
  const std::map<std::string, std::pair<std::string, double>> expected = {
      {"convolution_RTX_2080_Ti.json.gz", {"128,2,15,15,1,1,7,0", 0.9003}},
      {"convolution_RTX_3060_Laptop.json.gz", {"64,2,15,15,0,2,7,1", 1.806}},
      {"convolution_kttvalues_RTX_2080_Ti.json.gz", {"128,2,15,15,1,1,7,0", 0.7061}},
      {"convolution_milo6_A4000.json.gz", {"16,2,4,4,1,0", 1.507}},
      {"convolution_milo_A100.json.gz", {"32,4,1,3,1,0,1,1,15,15", 0.5536}},
      {"convolution_milo_A100_T4.json.gz", {"32,4,1,3,1,0,1,1,15,15", 0.5536}},
      {"convolution_milo_A4000.json.gz", {"256,1,2,4,0,0,0,1,15,15", 1.021}},
      {"convolution_milo_MI250X.json.gz", {"64,1,2,4,1,0,0,1,15,15", 0.6588}},
      {"dedispersion_milo_A100.json.gz", {"4,64,1,1,3,0,1,0", 68.12}},
      {"dedispersion_milo_A4000.json.gz", {"8,96,1,1,6,0,1,0", 147.7}},
      {"dedispersion_milo_MI250X.json.gz", {"8,32,1,1,1,0,0,0", 49.57}},
      {"gemm_RTX_2080_Ti.json.gz", {"128,128,32,16,8,16,32,2,8,4,0,0,0,1,32", 11.48}},
      {"pnpoly_RTX_2080_Ti.json.gz", {"3,448,20,0", 0.01591}},
      {"pnpoly_RTX_3060_Laptop.json.gz", {"0,384,20,0", 26.81}},
      {"pnpoly_kttvalues_RTX_2080_Ti.json.gz", {"0,128,20,2", 8.024}},
  };
  ASSERT_FALSE(files.empty());
  for (const std::string& f : files) {
    auto it = expected.find(f);
    ASSERT_NE(it, expected.end()) << "no published optimum for " << f;
    const std::string device = StrCat("sim:", dir, "/", f);
    const Json j = RunJson({"tune", "--local", "--device", device, "--strategy", "brute_force",
                            "--db", Db(), "--json"});
    ASSERT_TRUE(j.is_object()) << f;
    EXPECT_EQ(j.Find("best")->Find("key")->as_string(), it->second.first) << f;
    const double t = j.Find("best")->Find("time_ms")->as_double();
    EXPECT_NEAR(t, it->second.second, it->second.second * 5e-4) << f;
  }
}

TEST_F(CliTest, SeededRandomRunsAreReproducible) {
  const std::string cache = "sim:" + kRecorded + "convolution_milo_A100.json.gz";
  auto keys = [&](const std::string& db, const std::string& seed) {
    const Json t = RunJson({"tune", "--local", "--device", cache, "--strategy", "random",
                            "--max-evals", "60", "--seed", seed, "--db", db, "--json"});
    const Json show = RunJson({"show", t.Find("job_id")->as_string(), "--db", db, "--json"});
    std::vector<std::string> out;
    for (const Json& m : show.Find("measurements")->as_array()) {
      out.push_back(m.Find("key")->as_string());
    }
    return std::make_pair(t.Dump(), out);
  };
  const auto a = keys(Db("a.db"), "17");
  const auto b = keys(Db("b.db"), "17");
  const auto c = keys(Db("c.db"), "18");
  EXPECT_EQ(a.first, b.first);
  EXPECT_EQ(a.second, b.second);
  EXPECT_EQ(a.second.size(), 60u);
  EXPECT_NE(a.second, c.second);
}

// --timings: each step of a local job's start, in order, with its time
// since the process started; refused for a daemon's job.
TEST_F(CliTest, TimingsSayWhenEachStepOfTheStartWasDone) {
  const std::string cache = "sim:" + kRecorded + "pnpoly_kttvalues_RTX_2080_Ti.json.gz";
  const RunResult r =
      Run({"tune", "--local", "--device", cache, "--max-evals", "3", "--timings", "--db", Db()});
  ASSERT_EQ(r.code, 0) << r.err;
  std::vector<double> at;
  std::size_t from = 0;
  for (const char* step : {"device listed and opening", "job planned and bound to the device",
                           "store opened", "first measurement stored", "job ended"}) {
    const std::string line = StrCat("ktune: timings: ", step, " at ");
    const std::size_t found = r.err.find(line, from);
    ASSERT_NE(found, std::string::npos) << step << " missing or out of order in:\n" << r.err;
    from = found + line.size();
    at.push_back(std::stod(r.err.substr(from)));
    const std::string unit = " ms after the process started\n";
    EXPECT_EQ(r.err.substr(r.err.find(' ', from), unit.size()), unit) << r.err;
  }
  EXPECT_TRUE(std::is_sorted(at.begin(), at.end())) << r.err;
  EXPECT_GE(at.front(), 0);
  EXPECT_EQ(Run({"tune", "--local", "--device", cache, "--max-evals", "3", "--db", Db()})
                .err.find("timings"),
            std::string::npos);
  const RunResult remote = Run({"--server", "127.0.0.1:1", "tune", "--timings"});
  EXPECT_EQ(remote.code, 2);
  EXPECT_THAT(remote.err, HasSubstr("--timings: only with --local"));
}

// --max-seconds compares strategies under a time budget of recorded time:
// a row per strategy, each pair seed by seed, the per-repeat figures in
// --json.
TEST_F(CliTest, EvaluateUnderATimeBudgetComparesFinalTimesSeedBySeed) {
  const std::string cache = "sim:" + kRecorded + "sgemm_large_H200.json.gz";
  const RunResult text = Run({"evaluate", "--device", cache, "--strategy", "random,genetic",
                              "--repeats", "3", "--max-seconds", "20"});
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("20 s of recorded time per run"));
  EXPECT_THAT(text.out, HasSubstr("MEDIAN MS"));
  EXPECT_THAT(text.out, HasSubstr("random against genetic, seed by seed: faster in "));
  const Json j = RunJson({"evaluate", "--device", cache, "--strategy", "random", "--repeats", "3",
                          "--max-seconds", "20", "--json"});
  const Json& r = j.Find("spaces")->as_array().at(0).Find("results")->as_array().at(0);
  ASSERT_EQ(r.Find("final_best_ms")->as_array().size(), 3u);
  for (const Json& e : r.Find("final_evaluations")->as_array()) {
    EXPECT_GT(e.as_int(), 5);    // a candidate takes about half a second of
    EXPECT_LT(e.as_int(), 200);  // recorded time (compilation included)
  }
  EXPECT_EQ(r.Find("time_curve")->as_array().size(), 201u);
  EXPECT_EQ(Run({"evaluate", "--device", cache, "--max-seconds", "20", "--short-only"}).code, 2);
  EXPECT_EQ(Run({"evaluate", "--device", cache, "--max-seconds", "0"}).code, 2);
  // Compiling on 16 workers with 64 asked ahead, the same 20 s hold several
  // times the candidates (a median of 426 ms of recorded compilation, on
  // 16 workers, beside 20 ms of benchmarking).
  const Json pooled =
      RunJson({"evaluate", "--device", cache, "--strategy", "random", "--repeats", "3",
               "--max-seconds", "20", "--ahead", "64", "--compile-workers", "16", "--json"});
  EXPECT_EQ(pooled.Find("ahead")->as_int(), 64);
  EXPECT_EQ(pooled.Find("compile_workers")->as_int(), 16);
  const Json& pr = pooled.Find("spaces")->as_array().at(0).Find("results")->as_array().at(0);
  const auto& serial_evals = r.Find("final_evaluations")->as_array();
  const auto& pooled_evals = pr.Find("final_evaluations")->as_array();
  ASSERT_EQ(pooled_evals.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_GT(pooled_evals[i].as_int(), 4 * serial_evals[i].as_int());
  }
  const RunResult untimed = Run({"evaluate", "--device", cache, "--compile-workers", "16"});
  EXPECT_EQ(untimed.code, 2);
  EXPECT_THAT(untimed.err, HasSubstr("--compile-workers: give --max-seconds too"));
  EXPECT_EQ(Run({"evaluate", "--device", cache, "--ahead", "0"}).code, 2);
}

// A maximised objective through a whole job: kernels/sgemm.json ranks by
// TFLOP/s, so its losses are negative. auto (bayes) with 30 of the 144
// configurations, replaying their recording on the H200, ends on the
// optimum in nearly every seed; when the strategies took a negative loss
// for a failure and searched blind, it did in 5 of 30.
TEST_F(CliTest, AutoFindsTheOptimumOfAMaximisedObjective) {
  const std::string sim = "sim:" + kRecorded + "sgemm_H200.json.gz";
  int optimum = 0;
  for (int seed = 0; seed < 10; ++seed) {
    const Json j = RunJson({"tune", std::string(KTUNE_SOURCE_DIR) + "/kernels/sgemm.json",
                            "--local", "--device", sim, "--strategy", "auto", "--max-evals", "30",
                            "--seed", std::to_string(seed), "--db",
                            dir_ + "/sgemm" + std::to_string(seed) + ".db", "--json"});
    ASSERT_TRUE(j.is_object());
    EXPECT_EQ(j.Find("strategy")->as_string(), "auto (bayes)");
    EXPECT_EQ(j.Find("evaluations")->as_int(), 30);
    if (j.Find("best")->Find("key")->as_string() == "16,8,8,8") ++optimum;
  }
  EXPECT_GE(optimum, 8);
}

TEST_F(CliTest, EvaluateScoresAndShortOnlyStopsAtTheShortBudget) {
  const std::string cache = "sim:" + kRecorded + "pnpoly_kttvalues_RTX_2080_Ti.json.gz";
  const std::vector<std::string> args = {"evaluate",     "--device",  cache, "--strategy",
                                         "random,local", "--repeats", "3",   "--json"};
  const Json full = RunJson(args);
  std::vector<std::string> short_args = args;
  // On one thread (the full run: one per core), the same scores.
  short_args.insert(short_args.end(), {"--short-only", "--threads", "1"});
  const Json brief = RunJson(short_args);
  const Json& space = full.Find("spaces")->as_array().at(0);
  const Json& brief_space = brief.Find("spaces")->as_array().at(0);
  EXPECT_EQ(space.Find("long_budget")->as_int(), 10 * space.Find("short_budget")->as_int());
  const Json::Array& results = space.Find("results")->as_array();
  const Json::Array& brief_results = brief_space.Find("results")->as_array();
  ASSERT_EQ(results.size(), 2u);
  ASSERT_EQ(brief_results.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(results[i].Find("strategy")->as_string(), i == 0 ? "random" : "local");
    EXPECT_TRUE(results[i].Find("long_score")->is_number());
    EXPECT_TRUE(brief_results[i].Find("long_score")->is_null());
    // The same seeds, so the same short score and each repeat's best there.
    EXPECT_EQ(brief_results[i].Find("short_score")->as_double(),
              results[i].Find("short_score")->as_double());
    const Json::Array& at_short = results[i].Find("best_ms_at_short_budget")->as_array();
    const Json::Array& at_long = results[i].Find("best_ms_at_long_budget")->as_array();
    ASSERT_EQ(at_short.size(), 3u);
    ASSERT_EQ(at_long.size(), 3u);
    for (std::size_t r = 0; r < 3; ++r) {
      EXPECT_EQ(brief_results[i].Find("best_ms_at_short_budget")->as_array().at(r).as_double(),
                at_short[r].as_double());
      EXPECT_LE(at_long[r].as_double(), at_short[r].as_double());
    }
    EXPECT_EQ(brief_results[i].Find("best_ms_at_long_budget"), nullptr);
  }
  const RunResult text = Run(
      {"evaluate", "--device", cache, "--strategy", "random", "--repeats", "3", "--short-only"});
  EXPECT_EQ(text.code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("short budget only"));

  const RunResult unknown = Run({"evaluate", "--device", cache, "--strategy", "nope"});
  EXPECT_EQ(unknown.code, 2);
  EXPECT_THAT(unknown.err, HasSubstr("unknown strategy 'nope'"));
  const RunResult setting = Run({"evaluate", "--device", cache, "--strategy", "random:=3"});
  EXPECT_EQ(setting.code, 2);
  EXPECT_THAT(setting.err, HasSubstr("--strategy: 'random:=3': option '=3' is not key=value"));
  const RunResult range =
      Run({"evaluate", "--device", cache, "--strategy", "genetic:population=1"});
  EXPECT_EQ(range.code, 2);
  EXPECT_THAT(range.err, HasSubstr("--strategy: strategy genetic: option population must be"));
  const RunResult gpu = Run({"evaluate", "--device", "cuda:0"});
  EXPECT_EQ(gpu.code, 2);
  EXPECT_THAT(gpu.err, HasSubstr("give sim:FILE"));
  const RunResult repeats = Run({"evaluate", "--device", cache, "--repeats", "0"});
  EXPECT_EQ(repeats.code, 2);
  EXPECT_THAT(repeats.err, HasSubstr("--repeats"));
  EXPECT_THAT(Run({"evaluate", "--device", cache, "--threads", "0"}).err, HasSubstr("--threads"));
}

TEST_F(CliTest, StrategySettingsOnTheCommandLineShapeTheJob) {
  const std::string cache = "sim:" + kRecorded + "convolution_milo_A100.json.gz";
  auto tune = [&](const std::string& strategy) {
    return RunJson({"tune", "--local", "--device", cache, "--strategy", strategy, "--max-evals",
                    "6", "--db", Db(), "--json"});
  };
  const Json plain = tune("bayes");
  const Json set = tune("bayes:initial=6:candidates=50");
  EXPECT_EQ(set.Find("strategy")->as_string(), "bayes");
  EXPECT_EQ(set.Find("evaluations")->as_int(), 6);
  // The settings are part of the spec, so of the job's identity.
  EXPECT_NE(set.Find("job_id")->as_string(), plain.Find("job_id")->as_string());
  // The same settings in another order: the same job, resumed (nothing
  // measured again).
  EXPECT_EQ(tune("bayes:candidates=50:initial=6").Find("job_id")->as_string(),
            set.Find("job_id")->as_string());
}

TEST_F(CliTest, AWarmStartTriesTheBestKnownConfigurationFirst) {
  const std::string cache = "sim:" + kRecorded + "convolution_milo_A100.json.gz";
  RunJson(
      {"tune", "--local", "--device", cache, "--strategy", "brute_force", "--db", Db(), "--json"});
  for (const char* strategy : {"bayes", "genetic", "local", "annealing"}) {
    const RunResult r = Run({"tune", "--local", "--device", cache, "--strategy", strategy,
                             "--max-evals", "1", "--db", Db(), "--json"});
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_THAT(r.err, HasSubstr("warm start from "));
    EXPECT_THAT(r.err, HasSubstr(" earlier job(s): 4362 configurations"));
    absl::StatusOr<Json> j = ParseJson(r.out);
    ASSERT_TRUE(j.ok()) << r.out;
    EXPECT_EQ(j->Find("best")->Find("key")->as_string(), "32,4,1,3,1,0,1,1,15,15") << strategy;
  }
  const RunResult cold = Run({"tune", "--local", "--device", cache, "--strategy", "bayes",
                              "--max-evals", "1", "--no-warm-start", "--db", Db()});
  ASSERT_EQ(cold.code, 0) << cold.err;
  EXPECT_THAT(cold.err, Not(HasSubstr("warm start")));
}

TEST_F(CliTest, AJobSpreadOverTwoDevicesOfOneModel) {
  const std::string pnpoly = "sim:" + kRecorded + "pnpoly_kttvalues_RTX_2080_Ti.json.gz";
  // The same recording under another name: a second device of the model.
  const std::string copy = dir_ + "/pnpoly_copy.json.gz";
  {
    std::ifstream in(kRecorded + "pnpoly_kttvalues_RTX_2080_Ti.json.gz", std::ios::binary);
    std::ofstream(copy, std::ios::binary) << in.rdbuf();
  }
  const Json t = RunJson({"tune", "--local", "--device", pnpoly + ",sim:" + copy, "--strategy",
                          "brute_force", "--db", Db(), "--json"});
  EXPECT_EQ(t.Find("state")->as_string(), "succeeded");
  EXPECT_EQ(t.Find("evaluations")->as_int(), 4092);
  const std::string id = t.Find("job_id")->as_string();
  const Json show = RunJson({"show", id, "--db", Db(), "--json"});
  std::map<std::string, int> by_device;
  for (const Json& m : show.Find("measurements")->as_array()) {
    if (m.Find("status")->as_string() != "ok") continue;
    ++by_device[m.Find("conditions")->Find("device")->as_string()];
  }
  EXPECT_EQ(by_device.size(), 2u);  // both took a share, each named
  // Two models never make one job.
  const std::string conv = "sim:" + kRecorded + "convolution_milo_A100.json.gz";
  const RunResult mixed =
      Run({"tune", "--local", "--device", pnpoly + "," + conv, "--db", tmp_.File("m.db")});
  EXPECT_EQ(mixed.code, 2);
  EXPECT_THAT(mixed.err, HasSubstr("are not the same model"));
}

// The spec `ktune tune --local --device DEVICE --strategy random --seed
// SEED --max-evals N` makes: the same job, so the same identity.
v1::JobSpec RandomSearch(const std::string& device, std::uint64_t seed, std::int64_t evaluations) {
  v1::JobSpec spec;
  spec.mutable_strategy()->set_name("random");
  spec.mutable_strategy()->set_seed(seed);
  spec.mutable_strategy()->set_max_evaluations(evaluations);
  spec.mutable_device()->add_devices(device);
  return spec;
}

TEST_F(CliTest, ARunningJobIsNotRunTwiceAndAKilledOneReadsInterrupted) {
  const std::string cache = "sim:" + kRecorded + "convolution_milo_A100.json.gz";
  const std::vector<std::string> args = {"tune",        "--local", "--device",   cache,
                                         "--seed",      "9",       "--strategy", "random",
                                         "--max-evals", "300",     "--db",       Db()};
  // The same job, stopped for good after its first evaluation.
  const pid_t first = testing::RunJobInAChildUntil(RandomSearch(cache, 9, 300), cache, Db(), 1);
  ASSERT_GT(first, 0);
  testing::KilledAtExit reaper(first);
  std::string id;
  {
    absl::StatusOr<std::unique_ptr<Store>> s = Store::Open(Db(), false);
    ASSERT_TRUE(s.ok()) << s.status();
    id = (*(*s)->ListJobs())[0].id;
  }
  // The same job again while the first still runs it: refused, untouched.
  const RunResult second = Run(args);
  EXPECT_EQ(second.code, 1);
  EXPECT_THAT(second.err, HasSubstr("already running (pid " + std::to_string(first)));
  EXPECT_THAT(Run({"jobs", "--db", Db()}).out, HasSubstr("running"));

  kill(first, SIGKILL);
  EXPECT_EQ(testing::WaitExit(first), 128 + SIGKILL);
  reaper.Release();
  const RunResult jobs = Run({"jobs", "--db", Db()});
  EXPECT_THAT(jobs.out, HasSubstr("interrupted"));
  EXPECT_THAT(jobs.out, ::testing::Not(HasSubstr("running")));
  const Json shown = RunJson({"show", id, "--db", Db(), "--json"});
  EXPECT_EQ(shown.Find("job")->Find("state")->as_string(), "interrupted");
  EXPECT_THAT(shown.Find("job")->Find("message")->as_string(),
              HasSubstr("pid " + std::to_string(first)));
  // Run again, it resumes and finishes.
  const RunResult resumed = Run(args);
  EXPECT_EQ(resumed.code, 0) << resumed.err;
  EXPECT_THAT(resumed.err, HasSubstr("resumed"));
  EXPECT_THAT(Run({"jobs", "--db", Db()}).out, HasSubstr("succeeded"));
}

TEST_F(CliTest, SigkillPartWayThenResumeFinishesTheBudgetOnce) {
  const std::string cache = "sim:" + kRecorded + "convolution_milo_A100.json.gz";
  const std::vector<std::string> args = {
      "tune", "--local",     "--device", cache,  "--strategy", "random", "--seed",
      "4",    "--max-evals", "600",      "--db", Db(),         "--json"};
  // The same job, killed after its 50th stored evaluation.
  const pid_t pid = testing::RunJobInAChildUntil(RandomSearch(cache, 4, 600), cache, Db(), 50);
  ASSERT_GT(pid, 0);
  kill(pid, SIGKILL);
  ASSERT_EQ(testing::WaitExit(pid), 128 + SIGKILL);

  std::int64_t stored_before = 0;
  {
    absl::StatusOr<std::unique_ptr<Store>> s = Store::Open(Db(), false);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_TRUE((*s)->CheckIntegrity().ok());
    stored_before = (*(*s)->ListJobs())[0].evaluations;
    ASSERT_EQ(stored_before, 50);
  }
  const RunResult resumed = Run(args);
  ASSERT_EQ(resumed.code, 0) << resumed.err;
  EXPECT_THAT(resumed.err,
              HasSubstr("(" + std::to_string(stored_before) + " from the store, resumed)"));
  const Json j = *ParseJson(resumed.out);
  EXPECT_EQ(j.Find("evaluations")->as_int(), 600);

  // Same keys, same order as a run never interrupted; no key twice.
  const Json ref = RunJson({"tune", "--local", "--device", cache, "--strategy", "random", "--seed",
                            "4", "--max-evals", "600", "--db", Db("ref.db"), "--json"});
  auto keys = [&](const std::string& db, const std::string& id) {
    std::vector<std::string> out;
    const Json show = RunJson({"show", id, "--db", db, "--json"});
    for (const Json& m : show.Find("measurements")->as_array()) {
      out.push_back(m.Find("key")->as_string());
    }
    return out;
  };
  const std::vector<std::string> got = keys(Db(), j.Find("job_id")->as_string());
  EXPECT_EQ(got.size(), 600u);
  EXPECT_EQ(std::set<std::string>(got.begin(), got.end()).size(), 600u);
  EXPECT_EQ(got, keys(Db("ref.db"), ref.Find("job_id")->as_string()));
  EXPECT_EQ(j.Find("best")->Dump(), ref.Find("best")->Dump());
  absl::StatusOr<std::unique_ptr<Store>> s = Store::Open(Db(), false);
  EXPECT_TRUE((*s)->CheckIntegrity().ok());
}

TEST_F(CliTest, MalformedInputExitsTwoAndTouchesNothing) {
  const std::string cache = "sim:" + kRecorded + "pnpoly_kttvalues_RTX_2080_Ti.json.gz";
  // A store with one job in it.
  ASSERT_EQ(Run({"tune", "--local", "--device", cache, "--max-evals", "5", "--db", Db()}).code, 0);
  const std::string db_before = Slurp(Db());
  ASSERT_FALSE(db_before.empty());

  auto spec = [&](const std::string& name, const std::string& text) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  };
  const std::string params =
      R"([{"name": "between_method", "ints": [0, 1, 2, 3]}, {"name": "block_size_x", "ints": [32, 64]},
          {"name": "tile_size", "ints": [1, 2]}, {"name": "use_method", "ints": [0, 1, 2]}])";
  auto job = [&](const std::string& body) {
    return R"({"kernel": {"name": "cn_pnpoly"}, "parameters": )" + body + "}";
  };
  const std::string corrupt_gz = dir_ + "/corrupt.json.gz";
  {
    std::string bytes = Slurp(kRecorded + "pnpoly_kttvalues_RTX_2080_Ti.json.gz").substr(0, 5000);
    for (std::size_t i = 100; i < 200; ++i) bytes[i] = static_cast<char>(bytes[i] ^ 0x33);
    std::ofstream(corrupt_gz, std::ios::binary) << bytes;
  }
  const std::string not_a_cache = spec("notcache.json", R"({"hello": "world"})");
  const std::string foreign_db = dir_ + "/foreign.db";
  {
    absl::StatusOr<sqlite::Db> f = sqlite::Db::Open(foreign_db, true);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE(f->Exec("CREATE TABLE x (y); INSERT INTO x VALUES (1);").ok());
  }
  const std::string foreign_before = Slurp(foreign_db);

  const struct {
    std::vector<std::string> args;
    const char* message;
  } cases[] = {
      {{spec("a.json", "this is not json")},
       "not valid JSON: line 1, column 2: syntax error while parsing value - invalid literal"},
      {{spec("b.json", R"({"kernel": {"name": "k"}, "paramters": []})")},
       "paramters: no field of that name in JobSpec; did you mean parameters?"},
      {{spec("c.json", R"({"kernel": {"name": "k"}, "parameters": [{"name": 5}]})")},
       "parameters[0].name"},
      {{spec("d.json",
             job(params).insert(job(params).size() - 1, R"(, "constraints": ["block_size_x <"])"))},
       "constraints[0]: unexpected end of expression at column 15"},
      {{spec("e.json", job(params).insert(job(params).size() - 1,
                                          R"(, "constraints": ["blok_size_x < 64"])"))},
       "constraints[0]: unknown name 'blok_size_x' at column 1"},
      {{spec("f.json", job(R"([{"name": "between_method"}])"))},
       "parameters[0] (between_method): empty value list"},
      {{spec("g.json", job(R"([{"name": "a", "ints": [1]}, {"name": "a", "ints": [1]}])"))},
       "parameters[1].name: duplicate parameter 'a'"},
      {{spec("h.json", job(R"([{"name": "zz", "ints": [1]}])"))},
       "in the job but not recorded: zz"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args = {"tune"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    args.insert(args.end(), {"--local", "--device", cache, "--db", Db()});
    const RunResult r = Run(args);
    EXPECT_EQ(r.code, 2) << c.message << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.message));
    EXPECT_THAT(r.err, Not(HasSubstr(": error: ktune "))) << "the command named twice";
  }
  const struct {
    std::vector<std::string> args;
    const char* message;
  } flag_cases[] = {
      {{"tune", "--local", "--device", "sim:/nonexistent/x.json.gz"}, "x.json.gz: no such file"},
      {{"tune", "--local", "--device", "sim:" + corrupt_gz}, "corrupt.json.gz"},
      {{"tune", "--local", "--device", "sim:" + not_a_cache}, "neither a Kernel Tuner cache"},
      {{"tune", "--local", "--device", cache, "--max-evals", "ten"},
       "--max-evals: 'ten' is not an integer"},
      {{"tune", "--local", "--device", cache, "--max-evals", "-3"},
       "--max-evals: -3 is out of range"},
      {{"tune", "--local", "--device", cache, "--seed", "-1"},
       "--seed: '-1' is not a non-negative"},
      {{"tune", "--local", "--device", cache, "--max-evals", "99999999999999999999"},
       "--max-evals: 99999999999999999999 is out of range [0, 9223372036854775807]"},
      {{"tune", "--local", "--device", cache, "--seed", "99999999999999999999"},
       "--seed: 99999999999999999999 is larger than 18446744073709551615"},
      {{"tune", "--local", "--device", cache, "--max-seconds", "1e400"},
       "--max-seconds: 1e400 is out of range"},
      {{"tune", "--local", "--device", cache, "--max-seconds", "-5"},
       "--max-seconds: -5 is below 0"},
      {{"tune", "--local", "--device", cache, "--max-seconds", "soon"}, "--max-seconds: 'soon'"},
      {{"tune", "--local", "--device", cache, "--max-evals", "0"},
       "--max-evals: 0 is no budget; give 1 or more, or leave the flag out for no limit"},
      {{"tune", "--local", "--device", cache, "--max-seconds", "0"},
       "--max-seconds: 0 is no budget"},
      {{"tune", "--local", "--device", cache, "--strategy", "genius"},
       "--strategy: unknown strategy 'genius'"},
      {{"tune", "--local", "--device", cache, "--strategy", "bayes:initial"},
       "--strategy: 'bayes:initial': option 'initial' is not key=value"},
      {{"tune", "--local", "--device", cache, "--strategy", "bayes:nope=1"},
       "unknown option 'nope'"},
      {{"tune", "--local", "--device", cache, "--frobnicate"}, "unknown flag --frobnicate"},
      {{"tune", "--local", "--device", cache, "--seed"}, "--seed needs a value"},
      {{"tune", "--local"}, "no device"},
      {{"tune", spec("gpu.json", job(params)), "--local", "--device", "0", "--sim-speed", "2"},
       "--sim-speed sets how fast a recorded space replays; --device 0 is not one"},
      {{"tune", "--device", cache}, "give --local"},
      {{"tune", "--local", "--device", cache, "a.json", "b.json"}, "unexpected argument 'b.json'"},
      {{"best"}, "--kernel NAME is required"},
      {{"best", "--kernel", "k", "--problem", "N"}, "--problem: 'N' is not name=value"},
      {{"jobs", "--server", "127.0.0.1:1", "--db", "mine.db"},
       "--db is for a command run here; with --server the daemon uses its own"},
      {{"tune", "--server", "127.0.0.1:1", "--sim-speed", "3"},
       "--sim-speed is for a command run here"},
      {{"jobs", "--server", "127.0.0.1:99999"},
       "--server: 127.0.0.1:99999: port 99999 is not a port; give one in [1, 65535]"},
      {{"show"}, "give a JOB id"},
      {{"show", "nosuchjob"}, "JOB: no job nosuchjob"},
      {{"frobnicate"}, "unknown command 'frobnicate'"},
  };
  for (const auto& c : flag_cases) {
    std::vector<std::string> args = c.args;
    const bool remote = std::find(args.begin(), args.end(), "--server") != args.end();
    if (args[0] != "frobnicate" && !remote) args.insert(args.end(), {"--db", Db()});
    const RunResult r = Run(args);
    EXPECT_EQ(r.code, 2) << c.message << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.message));
    EXPECT_THAT(r.err, Not(HasSubstr(": error: ktune "))) << "the command named twice";
  }
  // A database file that is not ktune's is refused and left alone.
  const RunResult foreign = Run({"tune", "--local", "--device", cache, "--db", foreign_db});
  EXPECT_EQ(foreign.code, 2);
  EXPECT_THAT(foreign.err, HasSubstr("not a ktune database"));
  EXPECT_EQ(Slurp(foreign_db), foreign_before);
  // A GPU device needs a job file with the kernel source.
  const RunResult no_spec = Run({"tune", "--local", "--device", "cuda:0", "--db", Db()});
  EXPECT_EQ(no_spec.code, 2);
  EXPECT_THAT(no_spec.err, HasSubstr("a GPU tunes a kernel given by a job file"));
  const RunResult missing = Run({"jobs", "--db", dir_ + "/none.db"});
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(access((dir_ + "/none.db").c_str(), F_OK), 0);

  EXPECT_EQ(Slurp(Db()), db_before);
  absl::StatusOr<std::unique_ptr<Store>> s = Store::Open(Db(), false);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)->ListJobs()->size(), 1u);
}

TEST_F(CliTest, WithoutADriverTheGpuCommandsSaySo) {
  // A driver that is not there, on any machine (the measurement worker,
  // which loads it, inherits this).
  const std::string missing = "/nonexistent/libcuda.so.1";
  setenv("KTUNE_CUDA_DRIVER", missing.c_str(), 1);
  const RunResult devices = Run({"devices"});
  const RunResult tune = Run({"tune", std::string(KTUNE_SOURCE_DIR) + "/kernels/saxpy.json",
                              "--local", "--device", "0", "--db", Db()});
  unsetenv("KTUNE_CUDA_DRIVER");
  EXPECT_EQ(devices.code, 1);
  EXPECT_THAT(devices.err, HasSubstr("no CUDA driver on this machine (" + missing + ": "));
  EXPECT_EQ(devices.err.find(missing), devices.err.rfind(missing))
      << "named twice: " << devices.err;
  EXPECT_THAT(devices.err, HasSubstr("only simulated devices"));
  EXPECT_EQ(tune.code, 1);
  EXPECT_THAT(tune.err, HasSubstr("--device 0: "));
  EXPECT_THAT(tune.err, HasSubstr("simulated devices"));
  EXPECT_NE(access(Db().c_str(), F_OK), 0);  // nothing was stored
}

TEST_F(CliTest, HelpEverywhere) {
  for (const char* cmd : {"tune", "best", "jobs", "show", "devices"}) {
    const RunResult r = Run({cmd, "--help"});
    EXPECT_EQ(r.code, 0) << cmd;
    EXPECT_THAT(r.out, HasSubstr("Usage: ktune " + std::string(cmd))) << cmd;
  }
  const RunResult top = Run({"--help"});
  EXPECT_EQ(top.code, 0);
  EXPECT_THAT(top.out, HasSubstr("Commands:"));
  EXPECT_EQ(Run({"version"}).code, 0);
}

TEST_F(CliTest, JobSpecOverARecording) {
  // A spec naming the recording's parameters, constrained: only the
  // configurations passing the constraint are tried.
  const std::string path = dir_ + "/pnpoly.json";
  std::ofstream(path) << R"({
    "kernel": {"name": "cn_pnpoly"},
    "parameters": [
      {"name": "between_method", "ints": [0, 1, 2, 3]},
      {"name": "block_size_x", "range": {"start": 32, "stop": 992, "step": 32}},
      {"name": "tile_size", "ints": [1, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20]},
      {"name": "use_method", "ints": [0, 1, 2]}
    ],
    "constraints": ["block_size_x <= 256"],
    "device": {"devices": ["sim:)" +
                             kRecorded + R"(pnpoly_kttvalues_RTX_2080_Ti.json.gz"]},
    "strategy": {"name": "brute_force"}
  })";
  const Json j = RunJson({"tune", path, "--local", "--db", Db(), "--json"});
  EXPECT_EQ(j.Find("evaluations")->as_int(), 4 * 8 * 11 * 3);
  EXPECT_EQ(j.Find("best")->Find("key")->as_string(), "0,128,20,2");
}

}  // namespace
}  // namespace ktune
