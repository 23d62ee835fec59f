#include "trainer/data/shards.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "temp_dir.h"

namespace ablate::trainer {
namespace {

using ::ablate::testing::TempDir;
using ::testing::HasSubstr;

// The bytes of a shard built by hand, independent of WriteShard.
std::string ShardBytes(int32_t magic, int32_t version, int32_t count,
                       const std::vector<uint16_t>& tokens) {
  std::string bytes(1024 + 2 * tokens.size(), '\0');
  const int32_t head[3] = {magic, version, count};
  std::memcpy(bytes.data(), head, sizeof(head));
  if (!tokens.empty()) std::memcpy(bytes.data() + 1024, tokens.data(), 2 * tokens.size());
  return bytes;
}

TEST(Shards, ReadsAValidShard) {
  TempDir dir;
  const std::vector<uint16_t> body = {0, 1, 50256, 65535, 7};
  const std::string path = dir.Write("x.bin", ShardBytes(20240520, 1, 5, body));
  std::vector<int32_t> tokens = {42};  // appended after what is there
  ASSERT_TRUE(AppendShard(path, &tokens).ok());
  EXPECT_EQ(tokens, (std::vector<int32_t>{42, 0, 1, 50256, 65535, 7}));
}

TEST(Shards, ZeroTokenShardIsValid) {
  TempDir dir;
  const std::string path = dir.Write("zero.bin", ShardBytes(20240520, 1, 0, {}));
  std::vector<int32_t> tokens;
  ASSERT_TRUE(AppendShard(path, &tokens).ok());
  EXPECT_TRUE(tokens.empty());
}

struct BadShardCase {
  const char* name;
  std::string bytes;
  const char* message;  // after "<path>: "
};

TEST(Shards, RejectsBadFilesNamingFileAndProblem) {
  const std::vector<BadShardCase> cases = {
      {"empty.bin", "", "empty file (expected an llm.c token shard"},
      {"magic.bin", ShardBytes(123, 1, 2, {1, 2}),
       "bad magic 123 (expected 20240520, an llm.c token shard)"},
      {"text.bin", "The Fulton County Grand Jury said", "bad magic "},
      {"version.bin", ShardBytes(20240520, 2, 2, {1, 2}), "unsupported version 2 (expected 1"},
      {"truncated.bin", ShardBytes(20240520, 1, 1000, std::vector<uint16_t>(10, 3)),
       "truncated: header says 1000 tokens, file holds 10"},
      {"halftoken.bin", ShardBytes(20240520, 1, 3, {1, 2, 3}).substr(0, 1024 + 5),
       "truncated: header says 3 tokens, file holds 2"},
      {"header.bin", ShardBytes(20240520, 1, 0, {}).substr(0, 100),
       "truncated header: file holds 100 bytes"},
      {"negative.bin", ShardBytes(20240520, 1, -5, {}), "bad token count -5"},
      {"trailing.bin", ShardBytes(20240520, 1, 2, {1, 2, 3}),
       "2 trailing bytes: header says 2 tokens"},
  };
  TempDir dir;
  for (const BadShardCase& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = dir.Write(c.name, c.bytes);
    std::vector<int32_t> tokens = {9, 9};
    const Status st = AppendShard(path, &tokens);
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.code(), StatusCode::kDataLoss);
    EXPECT_THAT(st.message(), HasSubstr(path + ": " + c.message));
    EXPECT_EQ(tokens, (std::vector<int32_t>{9, 9})) << "tokens changed by a failed read";
  }
}

TEST(Shards, MissingFileIsNotFound) {
  TempDir dir;
  std::vector<int32_t> tokens;
  const Status st = AppendShard(dir.Join("nope.bin"), &tokens);
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_THAT(st.message(), HasSubstr("nope.bin"));
}

TEST(Shards, GlobConcatenatesInSortedOrder) {
  TempDir dir;
  // Written out of order: the reader must sort.
  dir.Write("train_000002.bin", ShardBytes(20240520, 1, 3, {20, 21, 22}));
  dir.Write("train_000001.bin", ShardBytes(20240520, 1, 2, {10, 11}));
  dir.Write("val_000000.bin", ShardBytes(20240520, 1, 1, {99}));
  StatusOr<ShardSet> set = ReadShards(dir.Join("train_*.bin"));
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ(set->files,
            (std::vector<std::string>{dir.Join("train_000001.bin"), dir.Join("train_000002.bin")}));
  EXPECT_EQ(set->tokens, (std::vector<int32_t>{10, 11, 20, 21, 22}));
  EXPECT_EQ(set->max_token, 22);
}

TEST(Shards, GlobStopsAtTheFirstBadShard) {
  TempDir dir;
  dir.Write("a.bin", ShardBytes(20240520, 1, 1, {1}));
  dir.Write("b.bin", ShardBytes(7, 1, 1, {1}));
  StatusOr<ShardSet> set = ReadShards(dir.Join("*.bin"));
  ASSERT_FALSE(set.ok());
  EXPECT_THAT(set.status().message(), HasSubstr(dir.Join("b.bin") + ": bad magic 7"));
}

TEST(Shards, GlobWithoutMatchIsNotFound) {
  TempDir dir;
  StatusOr<ShardSet> set = ReadShards(dir.Join("*.bin"));
  ASSERT_FALSE(set.ok());
  EXPECT_EQ(set.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(set.status().message(), HasSubstr("no file matches"));
}

TEST(Shards, WriteShardRoundTripsAndMatchesTheFormat) {
  TempDir dir;
  const std::vector<int32_t> tokens = {0, 65535, 50256, 3};
  const std::string path = dir.Join("w.bin");
  ASSERT_TRUE(WriteShard(path, tokens).ok());
  std::vector<int32_t> back;
  ASSERT_TRUE(AppendShard(path, &back).ok());
  EXPECT_EQ(back, tokens);
  // Byte-for-byte what llm.c writes.
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(bytes, ShardBytes(20240520, 1, 4, {0, 65535, 50256, 3}));
}

TEST(Shards, WriteShardRejectsIdsThatDoNotFitUint16) {
  TempDir dir;
  const std::vector<int32_t> tokens = {1, 65536};
  const Status st = WriteShard(dir.Join("w.bin"), tokens);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("token 65536 at position 1"));
}

}  // namespace
}  // namespace ablate::trainer
