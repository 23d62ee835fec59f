#include "trainer/data/tokenizer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ablate::trainer {
namespace {

TEST(ByteTokenizer, RoundTripsEveryByte) {
  std::string text;
  for (int b = 0; b < 256; ++b) text.push_back(static_cast<char>(b));
  text += "Grand Jury said Friday \xc3\xa9t\xc3\xa9.\n";  // UTF-8 stays bytes
  const std::vector<int32_t> tokens = EncodeBytes(text);
  ASSERT_EQ(tokens.size(), text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    EXPECT_EQ(tokens[i], static_cast<unsigned char>(text[i])) << i;
    EXPECT_GE(tokens[i], 0);
    EXPECT_LT(tokens[i], kByteVocabSize);
  }
  EXPECT_EQ(DecodeBytes(tokens), text);
}

TEST(ByteTokenizer, EmptyText) {
  EXPECT_TRUE(EncodeBytes("").empty());
  EXPECT_EQ(DecodeBytes({}), "");
}

TEST(ByteTokenizer, DecodeMarksIdsOutsideTheByteRange) {
  const std::vector<int32_t> tokens = {'a', 50256, 'b', -1};
  EXPECT_EQ(DecodeBytes(tokens), "a<50256>b<-1>");
}

}  // namespace
}  // namespace ablate::trainer
