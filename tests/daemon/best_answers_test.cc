#include <gtest/gtest.h>

#include <string>
#include <vector>

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

TEST(BestAnswersTest, CallsThatMissTogetherShareOneRead) {
  BestAnswers answers;
  grpc::ByteBuffer r1, r2, r3;
  EXPECT_TRUE(answers.Join("q", 5, {nullptr, &r1, {}}));   // reads
  EXPECT_FALSE(answers.Join("q", 5, {nullptr, &r2, {}}));  // waits for that read
  EXPECT_TRUE(answers.Join("q", 6, {nullptr, &r3, {}}));   // newer: its own read
  EXPECT_TRUE(answers.Join("other", 5, {nullptr, &r3, {}}));
  const grpc::ByteBuffer answer = Bytes("a");
  std::vector<BestWaiter> waiters = answers.Complete("q", 5, &answer, 5);
  ASSERT_EQ(waiters.size(), 2u);
  EXPECT_EQ(waiters[0].response, &r1);
  EXPECT_EQ(waiters[1].response, &r2);
  grpc::ByteBuffer out;
  EXPECT_TRUE(answers.Find("q", 5, &out));                     // remembered as read
  EXPECT_TRUE(answers.Join("q", 5, {nullptr, &r1, {}}));       // the read is over
  EXPECT_EQ(answers.Complete("q", 5, nullptr, 5).size(), 1u);  // a failed read
  EXPECT_EQ(answers.Complete("q", 6, nullptr, 6).size(), 1u);
  // A long request is read alone and never waited for.
  const std::string long_request(BestAnswers::kMaxRequestBytes + 1, 'x');
  EXPECT_TRUE(answers.Join(long_request, 5, {nullptr, &r1, {}}));
  EXPECT_TRUE(answers.Join(long_request, 5, {nullptr, &r2, {}}));
  EXPECT_TRUE(answers.Complete(long_request, 5, &answer, 5).empty());
}

}  // namespace
}  // namespace ktune
