#include "tuner/space/space.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace ktune {
namespace {

using ::testing::HasSubstr;

Parameter Ints(const std::string& name, const std::vector<std::int64_t>& values) {
  Parameter p;
  p.name = name;
  p.type = ValueType::kInt;
  for (std::int64_t v : values) p.values.emplace_back(v);
  return p;
}

Parameter Range(const std::string& name, std::int64_t lo, std::int64_t hi, std::int64_t step = 1) {
  std::vector<std::int64_t> v;
  for (std::int64_t x = lo; x <= hi; x += step) v.push_back(x);
  return Ints(name, v);
}

Parameter Strings(const std::string& name, std::vector<std::string> values) {
  Parameter p;
  p.name = name;
  p.type = ValueType::kString;
  for (auto& v : values) p.values.emplace_back(v);
  return p;
}

// Every raw combination, in product order, and whether it is valid.
std::vector<Config> BruteForceValid(const Space& space) {
  std::vector<Config> out;
  Config c;
  c.index.assign(space.num_params(), 0);
  std::function<void(std::size_t)> rec = [&](std::size_t d) {
    if (d == space.num_params()) {
      if (space.IsValid(c)) out.push_back(c);
      return;
    }
    for (std::uint32_t v = 0; v < space.param(d).values.size(); ++v) {
      c.index[d] = v;
      rec(d + 1);
    }
  };
  rec(0);
  return out;
}

std::vector<Config> EnumerateAll(const Space& space) {
  std::vector<Config> out;
  Space::Enumerator e = space.Enumerate();
  Config c;
  while (e.Next(&c)) out.push_back(c);
  return out;
}

struct SmallSpace {
  const char* name;
  std::vector<Parameter> params;
  std::vector<std::string> constraints;
  std::vector<NamedConstant> constants;
};

std::vector<SmallSpace> SmallSpaces() {
  return {
      {"unconstrained", {Range("a", 1, 3), Range("b", 1, 4)}, {}, {}},
      {"product bound",
       {Ints("bx", {1, 2, 4, 8, 16, 32}), Ints("by", {1, 2, 4, 8, 16, 32}), Range("t", 1, 4)},
       {"bx * by <= 128", "bx * by >= 4", "t * by <= 64"},
       {}},
      {"first and last linked",
       {Range("a", 0, 5), Range("b", 0, 3), Range("c", 0, 3), Range("d", 0, 5)},
       {"a + d == 5 or a == d", "b != c"},
       {}},
      {"chained comparison and constant",
       {Range("x", 1, 10), Range("y", 1, 10)},
       {"N / 4 <= x * y <= N"},
       {{"N", 40}}},
      {"division by zero excludes",
       {Range("a", 0, 4), Range("b", 0, 4)},
       {"10 % a == 0 or b == 0"},
       {}},
      {"strings",
       {Strings("mode", {"fast", "safe", "slow"}), Range("n", 1, 4)},
       {"mode != 'slow' or n == 1"},
       {}},
      {"nothing valid", {Range("a", 1, 3)}, {"a > 5"}, {}},
      {"constant false", {Range("a", 1, 3)}, {"1 > 2"}, {}},
      {"one value each", {Ints("a", {7}), Ints("b", {3})}, {"a > b"}, {}},
  };
}

TEST(SpaceTest, CountEnumerateAndValidityAgreeWithBruteForce) {
  for (SmallSpace& s : SmallSpaces()) {
    absl::StatusOr<Space> space = Space::Product(s.params, s.constraints, s.constants);
    ASSERT_TRUE(space.ok()) << s.name << ": " << space.status();
    const std::vector<Config> expected = BruteForceValid(*space);
    EXPECT_EQ(EnumerateAll(*space), expected) << s.name;  // same set, same order
    const SpaceCount count = space->Count();
    EXPECT_TRUE(count.exact) << s.name;
    EXPECT_EQ(static_cast<std::uint64_t>(count.count), expected.size()) << s.name;
  }
}

TEST(SpaceTest, SamplesAreValidAndUniform) {
  for (SmallSpace& s : SmallSpaces()) {
    absl::StatusOr<Space> space = Space::Product(s.params, s.constraints, s.constants);
    ASSERT_TRUE(space.ok());
    const std::vector<Config> valid = BruteForceValid(*space);
    Rng rng(42);
    if (valid.empty()) {
      EXPECT_FALSE(space->Sample(rng).has_value()) << s.name;
      continue;
    }
    std::map<Config, int> hits;
    const int draws = 400 * static_cast<int>(valid.size());
    for (int i = 0; i < draws; ++i) {
      std::optional<Config> c = space->Sample(rng);
      ASSERT_TRUE(c.has_value()) << s.name;
      ASSERT_TRUE(space->IsValid(*c)) << s.name;
      ++hits[*c];
    }
    EXPECT_EQ(hits.size(), valid.size()) << s.name;
    // 400 expected each; 5 standard deviations is about +-100.
    for (const auto& [c, n] : hits) {
      EXPECT_GT(n, 300) << s.name << " " << space->Key(c);
      EXPECT_LT(n, 500) << s.name << " " << space->Key(c);
    }
  }
}

TEST(SpaceTest, RecordedGemmSpaceCountsAsRecorded) {
  // Kernel Tuner's CLBlast GEMM space: 82944 raw, 17956 valid.
  std::vector<Parameter> p = {Ints("MWG", {16, 32, 64, 128}),
                              Ints("NWG", {16, 32, 64, 128}),
                              Ints("KWG", {32}),
                              Ints("MDIMC", {8, 16, 32}),
                              Ints("NDIMC", {8, 16, 32}),
                              Ints("MDIMA", {8, 16, 32}),
                              Ints("NDIMB", {8, 16, 32}),
                              Ints("KWI", {2}),
                              Ints("VWM", {1, 2, 4, 8}),
                              Ints("VWN", {1, 2, 4, 8}),
                              Ints("STRM", {0}),
                              Ints("STRN", {0}),
                              Ints("SA", {0, 1}),
                              Ints("SB", {0, 1}),
                              Ints("PRECISION", {32})};
  std::vector<std::string> c = {"KWG % KWI == 0",
                                "MWG % (MDIMC * VWM) == 0",
                                "NWG % (NDIMC * VWN) == 0",
                                "MWG % (MDIMA * VWM) == 0",
                                "NWG % (NDIMB * VWN) == 0",
                                "KWG % ((MDIMC * NDIMC) / MDIMA) == 0",
                                "KWG % ((MDIMC * NDIMC) / NDIMB) == 0"};
  absl::StatusOr<Space> space = Space::Product(p, c);
  ASSERT_TRUE(space.ok()) << space.status();
  EXPECT_EQ(static_cast<std::uint64_t>(space->RawSize()), 82944u);
  EXPECT_EQ(static_cast<std::uint64_t>(space->Count().count), 17956u);
  EXPECT_EQ(EnumerateAll(*space).size(), 17956u);
}

TEST(SpaceTest, CountsABillionCombinationsExactly) {
  // a * b <= 1000 over 1..1000 each has sum_a floor(1000 / a) = 7069
  // solutions; three free parameters of 10 values multiply by 1000.
  std::vector<Parameter> p = {Range("a", 1, 1000), Range("c", 0, 9), Range("b", 1, 1000),
                              Range("d", 0, 9), Range("e", 0, 9)};
  absl::StatusOr<Space> space = Space::Product(p, {"a * b <= 1000"});
  ASSERT_TRUE(space.ok());
  EXPECT_EQ(static_cast<std::uint64_t>(space->RawSize()), 1'000'000'000u);
  const SpaceCount count = space->Count();
  EXPECT_TRUE(count.exact);
  EXPECT_EQ(static_cast<std::uint64_t>(count.count), 7'069'000u);
  Rng rng(1);
  for (int i = 0; i < 1000; ++i) {
    std::optional<Config> c = space->Sample(rng);
    ASSERT_TRUE(c && space->IsValid(*c));
  }
}

TEST(SpaceTest, EntangledConstraintsFallBackToAnEstimate) {
  // One constraint over all six parameters defeats the dynamic programme;
  // the count becomes an estimate and sampling works by rejection.
  std::vector<Parameter> p;
  for (const char* n : {"a", "b", "c", "d", "e", "f"}) p.push_back(Range(n, 0, 39));
  absl::StatusOr<Space> space = Space::Product(p, {"a + b + c + d + e + f < 100"});
  ASSERT_TRUE(space.ok());
  // Exact count by convolution of the sum's distribution.
  std::vector<double> ways(1, 1.0);
  for (int k = 0; k < 6; ++k) {
    std::vector<double> next(ways.size() + 39, 0.0);
    for (std::size_t s = 0; s < ways.size(); ++s) {
      for (int v = 0; v < 40; ++v) next[s + static_cast<std::size_t>(v)] += ways[s];
    }
    ways = next;
  }
  double exact = 0;
  for (std::size_t s = 0; s < 100; ++s) exact += ways[s];
  const SpaceCount count = space->Count();
  EXPECT_FALSE(count.exact);
  EXPECT_NEAR(static_cast<double>(count.count), exact, 0.05 * exact);
  Rng rng(3);
  for (int i = 0; i < 100; ++i) {
    std::optional<Config> c = space->Sample(rng);
    ASSERT_TRUE(c && space->IsValid(*c));
  }
}

TEST(SpaceTest, KeysRoundTripAndNameBadValues) {
  absl::StatusOr<Space> space =
      Space::Product({Ints("bx", {32, 64}), Strings("mode", {"a", "b"})}, {});
  ASSERT_TRUE(space.ok());
  absl::StatusOr<Config> c = space->ParseKey("64,b");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(space->Key(*c), "64,b");
  EXPECT_EQ(space->ToJson(*c).Dump(), R"({"bx":64,"mode":"b"})");
  absl::StatusOr<Config> bad = space->ParseKey("64,z");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("value 'z' at position 2 is not a value of parameter mode"));
  EXPECT_THAT(std::string(space->ParseKey("64").status().message()),
              HasSubstr("has 1 value, the space has 2 parameters"));
}

TEST(SpaceTest, NeighboursAreValidAndDiffer) {
  absl::StatusOr<Space> space =
      Space::Product({Ints("bx", {1, 2, 4, 8}), Ints("by", {1, 2, 4, 8})}, {"bx * by <= 16"});
  ASSERT_TRUE(space.ok());
  const Config c = *space->ParseKey("4,4");
  std::vector<std::string> adjacent;
  for (const Config& n : space->Neighbours(c, Space::Neighbourhood::kAdjacent)) {
    adjacent.push_back(space->Key(n));
  }
  EXPECT_EQ(adjacent, (std::vector<std::string>{"2,4", "4,2"}));  // 8,4 and 4,8 are invalid
  std::vector<std::string> hamming;
  for (const Config& n : space->Neighbours(c, Space::Neighbourhood::kHamming)) {
    hamming.push_back(space->Key(n));
  }
  EXPECT_EQ(hamming, (std::vector<std::string>{"1,4", "2,4", "4,1", "4,2"}));
}

TEST(SpaceTest, ListSpaces) {
  std::vector<Parameter> p = {Ints("a", {1, 2, 3}), Ints("b", {10, 20})};
  std::vector<Config> configs = {{{2, 1}}, {{0, 0}}, {{2, 1}}, {{1, 0}}};
  absl::StatusOr<Space> space = Space::List(p, configs);
  ASSERT_TRUE(space.ok());
  EXPECT_TRUE(space->is_list());
  EXPECT_EQ(static_cast<std::uint64_t>(space->Count().count), 3u);  // duplicate dropped
  std::vector<std::string> keys;
  for (const Config& c : EnumerateAll(*space)) keys.push_back(space->Key(c));
  EXPECT_EQ(keys, (std::vector<std::string>{"3,20", "1,10", "2,10"}));  // list order
  EXPECT_FALSE(space->IsValid(Config{{0, 1}}));
  EXPECT_TRUE(space->IsValid(Config{{1, 0}}));
  std::vector<std::string> n;
  for (const Config& c : space->Neighbours(Config{{0, 0}}, Space::Neighbourhood::kHamming)) {
    n.push_back(space->Key(c));
  }
  EXPECT_EQ(n, (std::vector<std::string>{"2,10"}));
  Rng rng(5);
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) seen.insert(space->Key(*space->Sample(rng)));
  EXPECT_EQ(seen.size(), 3u);
  EXPECT_FALSE(Space::List(p, {{{5, 0}}}).ok());
}

struct BadSpace {
  std::vector<Parameter> params;
  std::vector<std::string> constraints;
  const char* message;
};

TEST(SpaceTest, BadDefinitionsNameTheProblem) {
  Parameter mixed = Ints("m", {1});
  mixed.values.emplace_back(2.0);
  Parameter not_finite;
  not_finite.name = "f";
  not_finite.type = ValueType::kFloat;
  not_finite.values = {Value(1.5), Value(std::numeric_limits<double>::infinity())};
  const BadSpace cases[] = {
      {{}, {}, "at least one parameter"},
      {{Ints("a", {})}, {}, "parameters[0] (a): empty value list"},
      {{Ints("a", {1}), Ints("a", {2})}, {}, "parameters[1].name: duplicate parameter 'a'"},
      {{Ints("a", {1, 2, 1})}, {}, "parameters[0] (a): duplicate value 1"},
      {{Ints("block size", {1})}, {}, "parameters[0].name: 'block size' is not a valid name"},
      {{mixed}, {}, "parameters[0] (m): value 1 is a float in a list of int"},
      {{Strings("s", {"a,b"})}, {}, "contains a comma"},
      {{not_finite}, {}, "parameters[0] (f): value 1 (inf) is not finite"},
      {{Ints("a", {1})}, {"a > 0", "b > 0"}, "constraints[1]: unknown name 'b' at column 1"},
      {{Ints("a", {1})}, {"a >"}, "constraints[0]: unexpected end of expression"},
      {{Strings("s", {"x"})}, {"s"}, "constraints[0]: expected a bool expression, got a string"},
  };
  for (const BadSpace& c : cases) {
    absl::StatusOr<Space> s = Space::Product(c.params, c.constraints);
    ASSERT_FALSE(s.ok()) << c.message;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(s.status().message()), HasSubstr(c.message));
  }
}

TEST(SpaceTest, MovesKeepCountsAndEnumeration) {
  static_assert(std::is_nothrow_move_constructible_v<Space>);
  static_assert(!std::is_copy_constructible_v<Space>);
  absl::StatusOr<Space> a = Space::Product({Range("x", 1, 10)}, {"x % 2 == 0"});
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(static_cast<int>(a->Count().count), 5);
  Space b = *std::move(a);
  EXPECT_EQ(static_cast<int>(b.Count().count), 5);
  EXPECT_EQ(EnumerateAll(b).size(), 5u);
}

}  // namespace
}  // namespace ktune
