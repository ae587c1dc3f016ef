#include <gtest/gtest.h>

#include <string>

#include "server/daemon/service.h"

namespace ktune {
namespace {

grpc::ByteBuffer Bytes(const std::string& text) {
  grpc::Slice slice(text);
  return grpc::ByteBuffer(&slice, 1);
}

std::string Text(const grpc::ByteBuffer& buffer) {
  grpc::Slice slice;
  EXPECT_TRUE(buffer.TrySingleSlice(&slice).ok() || buffer.DumpToSingleSlice(&slice).ok());
  return std::string(reinterpret_cast<const char*>(slice.begin()), slice.size());
}

TEST(BestAnswersTest, AnAnswerHoldsWhileItsGenerationDoes) {
  BestAnswers answers;
  grpc::ByteBuffer out;
  EXPECT_FALSE(answers.Find("q", 1, &out));
  answers.Put("q", 1, Bytes("answer"));
  ASSERT_TRUE(answers.Find("q", 1, &out));
  EXPECT_EQ(Text(out), "answer");
  EXPECT_FALSE(answers.Find("q", 2, &out));  // a best may have changed since
  EXPECT_FALSE(answers.Find("other", 1, &out));
  answers.Put("q", 2, Bytes("newer"));
  ASSERT_TRUE(answers.Find("q", 2, &out));
  EXPECT_EQ(Text(out), "newer");
}

TEST(BestAnswersTest, LongRequestsAndAFullTableAreNotKept) {
  BestAnswers answers;
  grpc::ByteBuffer out;
  const std::string long_request(BestAnswers::kMaxRequestBytes + 1, 'x');
  answers.Put(long_request, 1, Bytes("a"));
  EXPECT_FALSE(answers.Find(long_request, 1, &out));
  for (std::size_t i = 0; i < BestAnswers::kMaxEntries; ++i) {
    answers.Put(std::to_string(i), 1, Bytes("a"));
  }
  EXPECT_TRUE(answers.Find("0", 1, &out));
  answers.Put("one more", 1, Bytes("b"));  // the table was full: emptied first
  EXPECT_FALSE(answers.Find("0", 1, &out));
  EXPECT_TRUE(answers.Find("one more", 1, &out));
}

}  // namespace
}  // namespace ktune
