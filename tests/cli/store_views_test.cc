// The store's views from the command line: `merge` gathering stores,
// `show` listing a job's measurements, `export` writing them in other
// tools' formats.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "tests/cli/cli_fixture.h"
#include "tuner/base/json.h"
#include "tuner/store/store.h"

namespace ktune {
namespace {

using ::testing::HasSubstr;
using testing::Slurp;

TEST_F(CliTest, MergeGathersHeadlessStoresOnceAndRefusesWhatItCannotMerge) {
  const std::string conv = "sim:" + kRecorded + "convolution_milo_A100.json.gz";
  const std::string pnpoly = "sim:" + kRecorded + "pnpoly_kttvalues_RTX_2080_Ti.json.gz";
  // Two GPU nodes' stores, as headless jobs leave them.
  const Json a = RunJson({"tune", "--local", "--device", conv, "--max-evals", "20", "--seed", "1",
                          "--db", Db("node1.db"), "--json"});
  const Json b = RunJson({"tune", "--local", "--device", pnpoly, "--max-evals", "15", "--db",
                          Db("node2.db"), "--json"});
  const Json merged = RunJson({"merge", Db("node1.db"), Db("node2.db"), "--db", Db(), "--json"});
  const Json::Array& per_source = merged.Find("merged")->as_array();
  ASSERT_EQ(per_source.size(), 2u);
  EXPECT_EQ(per_source[0].Find("jobs_added")->as_int(), 1);
  EXPECT_EQ(per_source[0].Find("measurements")->as_int(), 20);
  EXPECT_EQ(per_source[1].Find("measurements")->as_int(), 15);
  EXPECT_EQ(per_source[1].Find("best")->as_int(), 1);
  // The merged store answers for both, as each node's store did.
  const Json best = RunJson({"best", "--db", Db(), "--kernel", "cn_pnpoly", "--json"});
  EXPECT_EQ(best.Find("results")->as_array().at(0).Find("key")->as_string(),
            b.Find("best")->Find("key")->as_string());
  const Json shown = RunJson({"show", a.Find("job_id")->as_string(), "--db", Db(), "--json"});
  EXPECT_EQ(shown.Find("measurements")->as_array().size(), 20u);
  // Again: nothing added.
  const RunResult again = Run({"merge", Db("node1.db"), Db("node2.db"), "--db", Db()});
  EXPECT_EQ(again.code, 0) << again.err;
  EXPECT_THAT(again.out, HasSubstr("node1.db: 0 jobs added, 0 extended, 0 measurements"));

  const std::string before = Slurp(Db());
  const std::string notes = Db("notes.txt");
  std::ofstream(notes) << "not a database\n";
  const struct {
    std::vector<std::string> args;
    const char* message;
  } refused[] = {
      {{"merge", "--db", Db()}, "give at least one SOURCE.db"},
      {{"merge", Db(), "--db", Db()}, "is the target store"},
      {{"merge", Db("node1.db"), notes, "--db", Db()},
       "notes.txt: not a SQLite database, so not a ktune store; nothing was changed"},
      {{"merge", Db("nowhere.db"), "--db", Db()}, "nowhere.db: no such database"},
  };
  for (const auto& c : refused) {
    const RunResult r = Run(c.args);
    EXPECT_EQ(r.code, 2) << c.message << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.message));
  }
  EXPECT_EQ(Slurp(Db()), before);
}

TEST_F(CliTest, ShowListsMeasurementsInEvaluationOrder) {
  const std::string cache = "sim:" + kRecorded + "pnpoly_kttvalues_RTX_2080_Ti.json.gz";
  const Json t = RunJson(
      {"tune", "--local", "--device", cache, "--strategy", "brute_force", "--db", Db(), "--json"});
  const std::string id = t.Find("job_id")->as_string();
  const Json show = RunJson({"show", id.substr(0, 6), "--db", Db(), "--json"});
  EXPECT_EQ(show.Find("job")->Find("id")->as_string(), id);
  EXPECT_EQ(show.Find("job")->Find("state")->as_string(), "succeeded");
  const Json::Array& ms = show.Find("measurements")->as_array();
  ASSERT_EQ(ms.size(), 4092u);
  int failed = 0;
  for (std::size_t i = 0; i < ms.size(); ++i) {
    EXPECT_EQ(ms[i].Find("sequence")->as_int(), static_cast<std::int64_t>(i));
    const std::string status = ms[i].Find("status")->as_string();
    if (status == "ok") {
      EXPECT_TRUE(ms[i].Find("time_ms")->is_number());
    } else {
      EXPECT_EQ(status, "runtime_fault");
      EXPECT_TRUE(ms[i].Find("time_ms")->is_null());
      ++failed;
    }
  }
  EXPECT_EQ(failed, 370);  // as recorded
  const RunResult text = Run({"show", id, "--db", Db()});
  EXPECT_EQ(text.code, 0);
  EXPECT_THAT(text.out, HasSubstr("runtime_fault"));
}

// A re-measured final contender says so in `show --json`; the others
// carry no such field.
TEST_F(CliTest, ShowMarksTheFinalRoundsMeasurements) {
  const std::string cache = "sim:" + kRecorded + "pnpoly_kttvalues_RTX_2080_Ti.json.gz";
  const Json t =
      RunJson({"tune", "--local", "--device", cache, "--max-evals", "5", "--db", Db(), "--json"});
  const std::string id = t.Find("job_id")->as_string();
  const std::string key = t.Find("best")->Find("key")->as_string();
  {
    absl::StatusOr<std::unique_ptr<Store>> s = Store::Open(Db(), false);
    ASSERT_TRUE(s.ok()) << s.status();
    absl::StatusOr<std::vector<StoredMeasurement>> ms = (*s)->LoadMeasurements(id);
    ASSERT_TRUE(ms.ok()) << ms.status();
    for (StoredMeasurement& m : *ms) {
      if (m.key != key) continue;
      m.measurement.conditions.set_final_round(true);
      ASSERT_TRUE((*s)->UpdateMeasurement(id, m).ok());
    }
  }
  const Json show = RunJson({"show", id, "--db", Db(), "--json"});
  int marked = 0;
  for (const Json& m : show.Find("measurements")->as_array()) {
    const Json* final_round = m.Find("conditions")->Find("final_round");
    if (final_round == nullptr) continue;
    ++marked;
    EXPECT_EQ(m.Find("key")->as_string(), key);
    EXPECT_TRUE(final_round->as_bool());
  }
  EXPECT_EQ(marked, 1);
}

// A job exported in Kernel Tuner's cache format and in T4's, replayed by
// the simulated device over everything it holds, gives the job's best
// and its status counts.
TEST_F(CliTest, ExportedResultsReplayToTheSameBestAndStatuses) {
  const std::string cache = "sim:" + kRecorded + "convolution_milo_A100.json.gz";
  const Json job = RunJson({"tune", "--local", "--device", cache, "--max-evals", "250", "--seed",
                            "4", "--db", Db(), "--json"});
  const std::string id = job.Find("job_id")->as_string();
  for (const std::string format : {"kernel-tuner", "t4"}) {
    const std::string file = Db(format + (format == "t4" ? ".json" : ".json.gz"));
    const RunResult exported = Run({"export", id, "--db", Db(), "--format", format, file});
    ASSERT_EQ(exported.code, 0) << exported.err;
    EXPECT_THAT(exported.out, HasSubstr("250 measurements"));
    const Json replay = RunJson({"tune", "--local", "--device", "sim:" + file, "--strategy",
                                 "brute_force", "--db", Db(format + ".db"), "--json"});
    EXPECT_EQ(replay.Find("evaluations")->as_int(), 250) << format;
    EXPECT_EQ(replay.Find("best")->Find("key")->as_string(),
              job.Find("best")->Find("key")->as_string())
        << format;
    EXPECT_DOUBLE_EQ(replay.Find("best")->Find("time_ms")->as_double(),
                     job.Find("best")->Find("time_ms")->as_double())
        << format;
    EXPECT_EQ(replay.Find("status_counts")->Dump(), job.Find("status_counts")->Dump()) << format;
  }
  EXPECT_EQ(Run({"export", id, "--db", Db(), "--format", "csv", Db("x")}).code, 2);
  EXPECT_EQ(Run({"export", id, "--db", Db(), "--format", "t4"}).code, 2);  // no FILE
  EXPECT_THAT(Run({"export", "nope", "--db", Db(), "--format", "t4", Db("y")}).err,
              HasSubstr("JOB: "));
}

}  // namespace
}  // namespace ktune
