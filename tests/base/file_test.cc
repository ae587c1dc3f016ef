#include "tuner/base/file.h"

#include "tests/testing/temp_dir.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace ktune {
namespace {

using ::testing::HasSubstr;

class FileTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& bytes) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }

  std::string WriteGzip(const std::string& name, const std::string& text) {
    std::string path = dir_ + "/" + name;
    gzFile f = gzopen(path.c_str(), "wb");
    gzwrite(f, text.data(), static_cast<unsigned>(text.size()));
    gzclose(f);
    return path;
  }

  testing::TempDir tmp_;
  const std::string& dir_ = tmp_.path();
};

TEST_F(FileTest, ReadsPlainAndGzipTheSame) {
  const std::string text = "{\"hello\": [1, 2, 3]}\n";
  EXPECT_EQ(*ReadFileContents(Write("a.json", text)), text);
  EXPECT_EQ(*ReadFileContents(WriteGzip("a.json.gz", text)), text);
}

TEST_F(FileTest, MissingFileIsNotFoundAndNamesThePath) {
  absl::StatusOr<std::string> r = ReadFileContents(dir_ + "/nope.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("nope.json"));
}

TEST_F(FileTest, DirectoryIsNotAFile) {
  absl::StatusOr<std::string> r = ReadFileContents(dir_);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("not a regular file"));
}

TEST_F(FileTest, CorruptAndTruncatedGzipAreErrors) {
  const std::string good = *ReadFileContents(WriteGzip("g.gz", std::string(100000, 'q')));
  std::ifstream in(dir_ + "/g.gz", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  absl::StatusOr<std::string> truncated =
      ReadFileContents(Write("t.gz", bytes.substr(0, bytes.size() / 2)));
  ASSERT_FALSE(truncated.ok());
  EXPECT_THAT(std::string(truncated.status().message()), HasSubstr("t.gz"));
  std::string corrupt = bytes;
  for (std::size_t i = 20; i < 40 && i < corrupt.size(); ++i) corrupt[i] ^= 0x5a;
  EXPECT_FALSE(ReadFileContents(Write("c.gz", corrupt)).ok());
}

TEST_F(FileTest, WriteAtomicallyReplacesContents) {
  const std::string path = dir_ + "/out.txt";
  ASSERT_TRUE(WriteFileAtomically(path, "one").ok());
  ASSERT_TRUE(WriteFileAtomically(path, "two").ok());
  EXPECT_EQ(*ReadFileContents(path), "two");
  EXPECT_FALSE(WriteFileAtomically(dir_ + "/no/such/dir/x", "y").ok());
}

}  // namespace
}  // namespace ktune
