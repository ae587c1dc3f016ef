#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "strategies/bayes.h"
#include "strategies/brute_force.h"
#include "strategies/random_search.h"
#include "strategies/registry.h"
#include "tests/testing/parameters.h"

namespace ktune {
namespace {

using ::testing::HasSubstr;

using testing::Range;

Space SmallSpace() {
  return *Space::Product({Range("a", 1, 8), Range("b", 1, 8)}, {"a * b <= 16"});
}

std::vector<std::string> Drain(Strategy& s, const Space& space, std::size_t batch) {
  std::vector<std::string> keys;
  while (true) {
    std::vector<Config> got = s.Ask(batch);
    EXPECT_LE(got.size(), batch);
    if (got.empty()) break;
    for (const Config& c : got) {
      EXPECT_TRUE(space.IsValid(c));
      keys.push_back(space.Key(c));
      Outcome o;
      o.loss = 1.0;
      s.Tell(c, o);
    }
  }
  return keys;
}

TEST(BruteForceTest, EveryValidConfigurationOnceInOrder) {
  const Space space = SmallSpace();
  std::vector<std::string> expected;
  Space::Enumerator e = space.Enumerate();
  Config c;
  while (e.Next(&c)) expected.push_back(space.Key(c));
  for (std::size_t batch : {1u, 3u, 7u, 1000u}) {
    BruteForce s(space);
    EXPECT_EQ(Drain(s, space, batch), expected) << batch;
  }
}

TEST(RandomSearchTest, SameSeedSameSequenceOtherSeedDiffers) {
  const Space space = SmallSpace();
  RandomSearch a(space, 7), b(space, 7), c(space, 8);
  const std::vector<std::string> ka = Drain(a, space, 5);
  const std::vector<std::string> kb = Drain(b, space, 5);
  const std::vector<std::string> kc = Drain(c, space, 5);
  EXPECT_EQ(ka, kb);
  EXPECT_NE(ka, kc);
  // Without replacement, and the whole space in the end.
  EXPECT_EQ(std::set<std::string>(ka.begin(), ka.end()).size(), ka.size());
  EXPECT_EQ(ka.size(), static_cast<std::size_t>(space.Count().count));
}

TEST(RandomSearchTest, BatchSizeDoesNotChangeTheSequence) {
  const Space space = SmallSpace();
  RandomSearch a(space, 99), b(space, 99);
  EXPECT_EQ(Drain(a, space, 1), Drain(b, space, 13));
}

TEST(RandomSearchTest, LargeSpacesAreSampledWithoutRepeats) {
  // 4 million valid configurations: above the list limit.
  const Space space = *Space::Product({Range("a", 0, 1999), Range("b", 0, 1999)}, {"a + b >= 0"});
  ASSERT_GT(space.Count().count, RandomSearch::kListLimit);
  RandomSearch s(space, 1), t(space, 1);
  std::set<std::string> seen;
  for (int i = 0; i < 20; ++i) {
    const std::vector<Config> got = s.Ask(50);
    const std::vector<Config> again = t.Ask(50);
    ASSERT_EQ(got.size(), 50u);
    ASSERT_EQ(got, again);
    for (const Config& c : got) EXPECT_TRUE(seen.insert(space.Key(c)).second);
  }
}

TEST(RegistryTest, KnownNamesAndHelpfulErrors) {
  const Space space = SmallSpace();
  EXPECT_EQ(StrategyNames(), (std::vector<std::string>{"annealing", "auto", "bayes", "brute_force",
                                                       "genetic", "local", "random"}));
  EXPECT_TRUE(MakeStrategy("random", space, {}).ok());
  absl::StatusOr<std::unique_ptr<Strategy>> bad = MakeStrategy("genius", space, {});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("unknown strategy 'genius'; known: annealing, auto, bayes"));
  StrategyOptions with_setting;
  with_setting.settings["population"] = "10";
  EXPECT_FALSE(MakeStrategy("random", space, with_setting).ok());
  EXPECT_TRUE(MakeStrategy("genetic", space, with_setting).ok());
}

TEST(RegistryTest, ParsesAStrategyWrittenAsText) {
  absl::StatusOr<StrategyChoice> plain = ParseStrategyChoice("genetic");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->name, "genetic");
  EXPECT_TRUE(plain->settings.empty());
  absl::StatusOr<StrategyChoice> set = ParseStrategyChoice("bayes:initial=8:input_warp=0");
  ASSERT_TRUE(set.ok());
  EXPECT_EQ(set->name, "bayes");
  EXPECT_EQ(set->settings,
            (std::map<std::string, std::string>{{"initial", "8"}, {"input_warp", "0"}}));
  absl::StatusOr<StrategyChoice> unnamed = ParseStrategyChoice(":initial=8");
  ASSERT_FALSE(unnamed.ok());
  EXPECT_EQ(unnamed.status().message(), "':initial=8' names no strategy");
  absl::StatusOr<StrategyChoice> bare = ParseStrategyChoice("bayes:initial");
  ASSERT_FALSE(bare.ok());
  EXPECT_EQ(bare.status().message(), "'bayes:initial': option 'initial' is not key=value");
}

TEST(RegistryTest, AutoIsExhaustiveWhenTheBudgetCoversTheSpace) {
  const Space space = SmallSpace();
  const auto n = static_cast<std::int64_t>(space.Count().count);
  EXPECT_EQ(ResolveAutoStrategy(space, 0), "brute_force");
  EXPECT_EQ(ResolveAutoStrategy(space, n), "brute_force");
  EXPECT_EQ(ResolveAutoStrategy(space, n - 1), "bayes");
  EXPECT_EQ(ResolveAutoStrategy(space, n - 1, /*warm=*/true), "local");
  EXPECT_EQ(ResolveAutoStrategy(space, n, /*warm=*/true), "brute_force");
}

// A time budget alone may end anywhere in the space: auto searches the
// promising part first instead of listing the space in order (a 5-minute
// job on a 10^5-configuration space was brute force in enumeration order).
TEST(RegistryTest, AutoSearchesUnderATimeBudgetAlone) {
  const Space space = SmallSpace();
  const auto n = static_cast<std::int64_t>(space.Count().count);
  EXPECT_EQ(ResolveAutoStrategy(space, 0, false, /*time_limited=*/true), "bayes");
  EXPECT_EQ(ResolveAutoStrategy(space, 0, /*warm=*/true, /*time_limited=*/true), "local");
  EXPECT_EQ(ResolveAutoStrategy(space, n, false, /*time_limited=*/true), "brute_force");
  StrategyOptions timed;
  timed.time_limited = true;
  absl::StatusOr<std::unique_ptr<Strategy>> s = MakeStrategy("auto", space, timed);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_NE(dynamic_cast<BayesianOptimization*>(s->get()), nullptr);
}

}  // namespace
}  // namespace ktune
