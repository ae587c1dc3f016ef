#include "tuner/base/json.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace ktune {
namespace {

using ::testing::HasSubstr;

TEST(JsonTest, ParsesEveryKindAndKeepsMemberOrder) {
  absl::StatusOr<Json> j = ParseJson(
      R"( {"b": 1, "a": [true, false, null, -2.5e3, "x\u00e9\n"], "c": {"d": 9223372036854775807}} )");
  ASSERT_TRUE(j.ok()) << j.status();
  ASSERT_TRUE(j->is_object());
  const Json::Object& o = j->as_object();
  ASSERT_EQ(o.size(), 3u);
  EXPECT_EQ(o[0].first, "b");
  EXPECT_EQ(o[1].first, "a");
  EXPECT_TRUE(j->Find("b")->is_int());
  const Json::Array& a = j->Find("a")->as_array();
  EXPECT_TRUE(a[0].as_bool());
  EXPECT_FALSE(a[1].as_bool());
  EXPECT_TRUE(a[2].is_null());
  EXPECT_EQ(a[3].type(), Json::Type::kDouble);
  EXPECT_DOUBLE_EQ(a[3].as_double(), -2500.0);
  EXPECT_EQ(a[4].as_string(), "x\xc3\xa9\n");
  EXPECT_EQ(j->Find("c")->Find("d")->as_int(), INT64_MAX);
}

TEST(JsonTest, IntegersTooLargeBecomeDoubles) {
  absl::StatusOr<Json> j = ParseJson("[18446744073709551616, 1.0, 3]");
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(j->as_array()[0].type(), Json::Type::kDouble);
  EXPECT_EQ(j->as_array()[1].type(), Json::Type::kDouble);
  EXPECT_EQ(j->as_array()[2].type(), Json::Type::kInt);
}

struct BadCase {
  const char* text;
  const char* message;
};

TEST(JsonTest, ErrorsGiveLineAndColumn) {
  // The position is that of the offending character (the last one read).
  const BadCase cases[] = {
      {"{\"a\": 1,\n \"b\": }",
       "line 2, column 7: syntax error while parsing value - unexpected '}'"},
      {"[1, 2", "line 1, column 6: syntax error while parsing array - unexpected end of input"},
      {"{\"a\" 1}", "line 1, column 6: syntax error while parsing object separator"},
      {"not json", "line 1, column 2: syntax error while parsing value - invalid literal"},
      {"[1] x", "line 1, column 5: "},
      {"\"abc",
       "line 1, column 5: syntax error while parsing value - invalid string: missing closing "
       "quote"},
      {"[01]", "line 1, column 3: syntax error while parsing array"},
      {"[1.]", "expected digit after '.'"},
      {"[1e999]", "line 1, column 6: number overflow parsing '1e999'"},
      {"\"\\ud800\"", "surrogate U+D800..U+DBFF must be followed by U+DC00..U+DFFF"},
      {"\"\xff\"", "ill-formed UTF-8 byte"},
      {"\"a\x01\"", "control character U+0001 (SOH) must be escaped"},
      {"", "line 1, column 1: syntax error while parsing value - unexpected end of input"},
  };
  for (const BadCase& c : cases) {
    absl::StatusOr<Json> j = ParseJson(c.text);
    ASSERT_FALSE(j.ok()) << c.text;
    EXPECT_THAT(std::string(j.status().message()), HasSubstr(c.message)) << c.text;
  }
}

TEST(JsonTest, DeepNestingIsRefused) {
  const std::string deep(100000, '[');
  absl::StatusOr<Json> j = ParseJson(deep);
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().message(), "line 1, column 257: nesting deeper than 256 levels");
  // Brackets inside strings do not count, and 256 levels are fine.
  std::string ok = "{\"[[[\": " + std::string(255, '[') + std::string(255, ']') + "}";
  EXPECT_TRUE(ParseJson(ok).ok()) << ParseJson(ok).status();
  absl::StatusOr<Json> nested = ParseJson("\n{\"a\\\"[\": " + std::string(256, '['));
  ASSERT_FALSE(nested.ok());
  EXPECT_THAT(std::string(nested.status().message()), HasSubstr("line 2, column 265: nesting"));
}

TEST(JsonTest, DuplicateNamesAreKeptInOrderAndFindGivesTheFirst) {
  absl::StatusOr<Json> j = ParseJson(R"({"a": 1, "b": 2, "a": 3})");
  ASSERT_TRUE(j.ok()) << j.status();
  ASSERT_EQ(j->as_object().size(), 3u);
  EXPECT_EQ(j->as_object()[2].first, "a");
  EXPECT_EQ(j->Find("a")->as_int(), 1);
}

TEST(JsonTest, DumpRoundTrips) {
  Json o = Json::MakeObject();
  o.Set("name", "a \"quoted\"\tvalue\x01");
  o.Set("pi", 3.141592653589793);
  o.Set("n", std::int64_t{-42});
  o.Set("none", Json());
  Json a = Json::MakeArray();
  a.Push(true);
  a.Push(0.1);
  o.Set("list", std::move(a));
  const std::string text = o.Dump();
  EXPECT_EQ(
      text,
      R"({"name":"a \"quoted\"\tvalue\u0001","pi":3.141592653589793,"n":-42,"none":null,"list":[true,0.1]})");
  absl::StatusOr<Json> back = ParseJson(text);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->Dump(), text);
  EXPECT_EQ(ParseJson(o.Dump(2))->Dump(), text);
}

TEST(JsonTest, NonFiniteDoublesDumpAsNull) {
  Json a = Json::MakeArray();
  a.Push(std::numeric_limits<double>::quiet_NaN());
  a.Push(std::numeric_limits<double>::infinity());
  EXPECT_EQ(a.Dump(), "[null,null]");
}

}  // namespace
}  // namespace ktune
