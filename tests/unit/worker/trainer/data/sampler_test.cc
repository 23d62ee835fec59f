#include "trainer/data/sampler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <numeric>
#include <set>
#include <vector>

namespace ablate::trainer {
namespace {

using ::testing::HasSubstr;

// tokens[i] = i, so a window's first input is its start offset.
std::vector<int32_t> Iota(int n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), 0);
  return t;
}

// Draws B windows and returns their start offsets, checking inputs/targets are the window shifted.
std::vector<int32_t> DrawStarts(BatchSampler& s, int B) {
  const int T = s.seq_len();
  std::vector<int32_t> in(static_cast<size_t>(B) * T, -1), tg(static_cast<size_t>(B) * T, -1);
  s.Next(B, in.data(), tg.data());
  std::vector<int32_t> starts;
  for (int b = 0; b < B; ++b) {
    const int32_t start = in[static_cast<size_t>(b) * T];
    for (int t = 0; t < T; ++t) {
      EXPECT_EQ(in[static_cast<size_t>(b) * T + t], start + t);
      EXPECT_EQ(tg[static_cast<size_t>(b) * T + t], start + t + 1);
    }
    starts.push_back(start);
  }
  return starts;
}

TEST(BatchSampler, RejectsSplitsTooSmallForOneWindow) {
  const std::vector<int32_t> tokens = Iota(8);
  StatusOr<BatchSampler> s = BatchSampler::Create(&tokens, 8, 1);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("holds 8 tokens, too few for one window of "
                                              "seq_len + 1 = 9"));
  EXPECT_FALSE(BatchSampler::Create(&tokens, 0, 1).ok());
  // Exactly one window fits.
  StatusOr<BatchSampler> one = BatchSampler::Create(&tokens, 7, 1);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->num_windows(), 1u);
  EXPECT_EQ(DrawStarts(*one, 3), (std::vector<int32_t>{0, 0, 0}));
}

TEST(BatchSampler, EachEpochCoversEveryWindowOnce) {
  constexpr int kN = 1000, kT = 7;  // W = 142 windows, 999 - 994 = 5 tokens of slack
  const std::vector<int32_t> tokens = Iota(kN);
  StatusOr<BatchSampler> s = BatchSampler::Create(&tokens, kT, 42);
  ASSERT_TRUE(s.ok());
  const int W = static_cast<int>(s->num_windows());
  ASSERT_EQ(W, 142);
  std::set<int32_t> offsets;
  std::vector<int32_t> first_order;
  for (int epoch = 0; epoch < 20; ++epoch) {
    EXPECT_EQ(s->state(), (BatchSampler::State{static_cast<uint64_t>(epoch), 0}))
        << "epoch " << epoch;
    const std::vector<int32_t> starts = DrawStarts(*s, W);
    const int32_t offset = *std::min_element(starts.begin(), starts.end());
    EXPECT_LE(offset, 5);
    offsets.insert(offset);
    std::set<int32_t> seen;
    for (int32_t st : starts) {
      EXPECT_EQ((st - offset) % kT, 0) << "windows overlap";
      EXPECT_LE(st + kT, kN - 1) << "window runs past the end";
      seen.insert(st);
    }
    EXPECT_EQ(seen.size(), static_cast<size_t>(W)) << "a window repeats within epoch " << epoch;
    EXPECT_EQ(s->state(), (BatchSampler::State{static_cast<uint64_t>(epoch) + 1, 0}));
    if (epoch == 0) {
      first_order = starts;
      std::vector<int32_t> sorted = starts;
      std::sort(sorted.begin(), sorted.end());
      EXPECT_NE(starts, sorted) << "epoch 0 is not shuffled";
    } else {
      EXPECT_NE(starts, first_order) << "epoch " << epoch << " repeats epoch 0's order";
    }
  }
  EXPECT_GT(offsets.size(), 1u) << "the slack tokens are never used";
}

TEST(BatchSampler, SameSeedSameBatchesOtherSeedOthers) {
  const std::vector<int32_t> tokens = Iota(5000);
  StatusOr<BatchSampler> a = BatchSampler::Create(&tokens, 16, 7);
  StatusOr<BatchSampler> b = BatchSampler::Create(&tokens, 16, 7);
  StatusOr<BatchSampler> c = BatchSampler::Create(&tokens, 16, 8);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  std::vector<int32_t> sa, sb, sc;
  for (int i = 0; i < 200; ++i) {  // 1600 windows: several epochs of 312
    for (int32_t v : DrawStarts(*a, 8)) sa.push_back(v);
    for (int32_t v : DrawStarts(*b, 8)) sb.push_back(v);
    for (int32_t v : DrawStarts(*c, 8)) sc.push_back(v);
  }
  EXPECT_EQ(sa, sb);
  EXPECT_NE(sa, sc);
}

TEST(BatchSampler, RestoredStateContinuesIdentically) {
  const std::vector<int32_t> tokens = Iota(1000);
  StatusOr<BatchSampler> run = BatchSampler::Create(&tokens, 7, 3);  // 142 windows per epoch
  ASSERT_TRUE(run.ok());
  for (int i = 0; i < 29; ++i) DrawStarts(*run, 5);  // 145 windows: into epoch 1
  const BatchSampler::State saved = run->state();
  EXPECT_EQ(saved, (BatchSampler::State{1, 3}));
  std::vector<int32_t> expected;
  for (int i = 0; i < 100; ++i) {
    for (int32_t v : DrawStarts(*run, 5)) expected.push_back(v);
  }

  // A fresh sampler (a resumed process) that has drawn other batches before the restore.
  StatusOr<BatchSampler> resumed = BatchSampler::Create(&tokens, 7, 3);
  ASSERT_TRUE(resumed.ok());
  DrawStarts(*resumed, 11);
  ASSERT_TRUE(resumed->set_state(saved).ok());
  std::vector<int32_t> got;
  for (int i = 0; i < 100; ++i) {
    for (int32_t v : DrawStarts(*resumed, 5)) got.push_back(v);
  }
  EXPECT_EQ(got, expected);
  EXPECT_EQ(resumed->state(), run->state());
}

TEST(BatchSampler, StateAtAnEpochsEndRollsOver) {
  const std::vector<int32_t> tokens = Iota(100);
  StatusOr<BatchSampler> a = BatchSampler::Create(&tokens, 9, 5);  // 11 windows
  ASSERT_TRUE(a.ok());
  DrawStarts(*a, 11);
  EXPECT_EQ(a->state(), (BatchSampler::State{1, 0}));
  const std::vector<int32_t> next = DrawStarts(*a, 4);

  StatusOr<BatchSampler> b = BatchSampler::Create(&tokens, 9, 5);
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(b->set_state({0, 11}).ok());
  EXPECT_EQ(b->state(), (BatchSampler::State{1, 0}));
  EXPECT_EQ(DrawStarts(*b, 4), next);
  ASSERT_TRUE(b->set_state({1, 0}).ok());
  EXPECT_EQ(DrawStarts(*b, 4), next);
}

TEST(BatchSampler, RejectsAStateFromOtherData) {
  const std::vector<int32_t> tokens = Iota(100);
  StatusOr<BatchSampler> s = BatchSampler::Create(&tokens, 9, 5);
  ASSERT_TRUE(s.ok());
  const Status st = s->set_state({2, 12});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("index 12 is past the 11 windows"));
  EXPECT_EQ(s->state(), (BatchSampler::State{0, 0}));
}

TEST(EvalBatches, FirstWindowsInOrder) {
  const std::vector<int32_t> tokens = Iota(200);
  constexpr int kT = 10, kB = 4;  // 19 windows: 4 full batches
  StatusOr<EvalBatches> ev = EvalBatches::Create(&tokens, kT, kB, 3);
  ASSERT_TRUE(ev.ok()) << ev.status().ToString();
  ASSERT_EQ(ev->num_batches(), 3);
  EXPECT_EQ(ev->num_targets(), 3u * kB * kT);
  std::vector<int32_t> in(kB * kT), tg(kB * kT);
  for (int pass = 0; pass < 2; ++pass) {  // the same tokens every evaluation
    for (int i = 0; i < ev->num_batches(); ++i) {
      ev->Get(i, in.data(), tg.data());
      for (int b = 0; b < kB; ++b) {
        for (int t = 0; t < kT; ++t) {
          EXPECT_EQ(in[b * kT + t], (i * kB + b) * kT + t);
          EXPECT_EQ(tg[b * kT + t], (i * kB + b) * kT + t + 1);
        }
      }
    }
  }
  StatusOr<EvalBatches> all = EvalBatches::Create(&tokens, kT, kB, 0);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->num_batches(), 4);
  StatusOr<EvalBatches> capped = EvalBatches::Create(&tokens, kT, kB, 100);
  ASSERT_TRUE(capped.ok());
  EXPECT_EQ(capped->num_batches(), 4);
}

TEST(EvalBatches, RejectsSplitsTooSmallForOneBatch) {
  const std::vector<int32_t> exact = Iota(4 * 10 + 1);
  StatusOr<EvalBatches> ok = EvalBatches::Create(&exact, 10, 4, 8);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->num_batches(), 1);
  const std::vector<int32_t> small = Iota(4 * 10);
  StatusOr<EvalBatches> ev = EvalBatches::Create(&small, 10, 4, 8);
  ASSERT_FALSE(ev.ok());
  EXPECT_EQ(ev.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(ev.status().message(), HasSubstr("validation split holds 40 tokens"));
  EXPECT_THAT(ev.status().message(), HasSubstr("needs 41"));
  const std::vector<int32_t> none;
  EXPECT_FALSE(EvalBatches::Create(&none, 10, 1, 8).ok());
  EXPECT_FALSE(EvalBatches::Create(&exact, 10, 0, 8).ok());
}

}  // namespace
}  // namespace ablate::trainer
