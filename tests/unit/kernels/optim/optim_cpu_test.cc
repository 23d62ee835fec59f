// The optimizers' per-element rules (kernels/optim/optim_cpu.h): each against its formula in
// float64 (the semantics), against the same expression evaluated one element at a time in fp32
// (bit for bit: the loops round as written, whatever OpenMP and the vectorizer do), and the same
// values for any thread count; the per-step scalars' rounding.
#include "optim/optim_cpu.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace ablate::kernels {
namespace {

constexpr int64_t kN = 5000;  // not a multiple of any vector width or chunk

std::vector<float> Random(int64_t n, uint64_t seed, float scale, bool positive = false) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = positive ? std::fabs(d(rng)) : d(rng);
  return v;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(OptimCpuTest, ScalarsRoundAsTheOptimizerDoes) {
  const AdamScalars a = MakeAdamScalars(0.9, 0.95, 1e-8, 3);
  EXPECT_EQ(a.b1, float(0.9));
  EXPECT_EQ(a.b2, float(0.95));
  EXPECT_EQ(a.eps, float(1e-8));
  EXPECT_EQ(a.ib1, float(1.0 / (1.0 - std::pow(0.9, 3.0))));
  EXPECT_EQ(a.ib2, float(1.0 / (1.0 - std::pow(0.95, 3.0))));
  EXPECT_EQ(StepLr(1e-2, 0.3), float(1e-2 * 0.3));
  const float lr = StepLr(1e-2, 1.0);
  EXPECT_EQ(DecayFactor(true, 0.1, lr), float(1.0 - lr * 0.1));
  EXPECT_EQ(DecayFactor(false, 0.1, lr), 1.0f);
  EXPECT_EQ(DecayFactor(true, 0.0, lr), 1.0f);
  EXPECT_EQ(SpectralScale(lr, 0.0, 256, 64), float(lr * 2.0));
  EXPECT_EQ(SpectralScale(lr, 0.0, 64, 256), lr);
  EXPECT_EQ(SpectralScale(lr, 0.5, 256, 64), lr);
}

TEST(OptimCpuTest, AdamWMatchesItsFormula) {
  const AdamScalars a = MakeAdamScalars(0.9, 0.95, 1e-8, 2);
  const float lr = 1e-3f, decay = 0.999f;
  auto w = Random(kN, 1, 0.02f), m = Random(kN, 2, 1e-3f), v = Random(kN, 3, 1e-6f, true);
  const auto g = Random(kN, 4, 1e-2f);
  auto w1 = w, m1 = m, v1 = v;
  const double sq = AdamWUpdate(w.data(), m.data(), v.data(), g.data(), kN, a, lr, decay);
  double sq1 = 0;
  for (int64_t i = 0; i < kN; ++i) {
    const double md = double(a.b1) * m1[i] + (1 - double(a.b1)) * g[i];
    const double vd = double(a.b2) * v1[i] + (1 - double(a.b2)) * double(g[i]) * g[i];
    const double ud = lr * (md * a.ib1) / (std::sqrt(vd * a.ib2) + a.eps);
    EXPECT_NEAR(w[i], w1[i] * double(decay) - ud, 1e-6 * (std::fabs(w1[i]) + std::fabs(ud)));
    m1[i] = a.b1 * m1[i] + (1 - a.b1) * g[i];
    v1[i] = a.b2 * v1[i] + (1 - a.b2) * g[i] * g[i];
    const float u = lr * (m1[i] * a.ib1) / (std::sqrt(v1[i] * a.ib2) + a.eps);
    w1[i] = w1[i] * decay - u;
    sq1 += double(u) * u;
  }
  EXPECT_TRUE(SameBits(w, w1));
  EXPECT_TRUE(SameBits(m, m1));
  EXPECT_TRUE(SameBits(v, v1));
  EXPECT_NEAR(sq, sq1, 1e-12 * sq1);
}

TEST(OptimCpuTest, RmsDirectionUpdatesTheMomentsAsAdamW) {
  const AdamScalars a = MakeAdamScalars(0.9, 0.95, 1e-8, 5);
  auto m = Random(kN, 5, 1e-3f), v = Random(kN, 6, 1e-6f, true);
  const auto g = Random(kN, 7, 1e-2f);
  auto ma = m, va = v;
  auto w = Random(kN, 8, 0.02f);
  AdamWUpdate(w.data(), ma.data(), va.data(), g.data(), kN, a, 1e-3f, 1.0f);
  std::vector<float> dir(static_cast<size_t>(kN));
  RmsDirection(dir.data(), m.data(), v.data(), g.data(), kN, a);
  EXPECT_TRUE(SameBits(m, ma));
  EXPECT_TRUE(SameBits(v, va));
  for (int64_t i = 0; i < kN; ++i) {
    const float want = (m[i] * a.ib1) / (std::sqrt(v[i] * a.ib2) + a.eps);
    ASSERT_EQ(std::memcmp(&dir[i], &want, sizeof(float)), 0) << i;
  }
}

TEST(OptimCpuTest, MomentumDirectionSumEmaAndNesterov) {
  const auto g = Random(kN, 9, 1e-2f);
  for (bool ema : {false, true}) {
    for (bool nesterov : {false, true}) {
      const float mu = ema ? 0.95f : 0.9f;
      const float gain = ema ? 1 - mu : 1.0f;
      const auto B0 = Random(kN, 10, 1e-2f);
      auto B = B0, B1 = B0;
      std::vector<float> dir(static_cast<size_t>(kN));
      MomentumDirection(dir.data(), B.data(), g.data(), kN, mu, gain, nesterov);
      for (int64_t i = 0; i < kN; ++i) {
        EXPECT_NEAR(B[i], double(mu) * B0[i] + double(gain) * g[i], 1e-8);
        B1[i] = mu * B1[i] + gain * g[i];
        const float want = nesterov ? gain * g[i] + mu * B1[i] : B1[i];
        ASSERT_EQ(std::memcmp(&dir[i], &want, sizeof(float)), 0) << i;
      }
      EXPECT_TRUE(SameBits(B, B1)) << "ema " << ema << " nesterov " << nesterov;
    }
  }
}

TEST(OptimCpuTest, ApplySpectralUpdate) {
  auto w = Random(kN, 11, 0.02f), w1 = w;
  const auto upd = Random(kN, 12, 1.0f);
  const float scale = 2e-3f, decay = 0.9995f;
  const double sq = ApplySpectralUpdate(w.data(), upd.data(), kN, scale, decay);
  double sq1 = 0;
  for (int64_t i = 0; i < kN; ++i) {
    const float u = scale * upd[i];
    w1[i] = w1[i] * decay - u;
    sq1 += double(u) * u;
  }
  EXPECT_TRUE(SameBits(w, w1));
  EXPECT_NEAR(sq, sq1, 1e-12 * sq1);
}

TEST(OptimCpuTest, ValuesDoNotDependOnTheThreadCount) {
  const AdamScalars a = MakeAdamScalars(0.9, 0.95, 1e-8, 1);
  const auto g = Random(kN, 13, 1e-2f);
  std::vector<std::vector<float>> out;
  for (int threads : {1, 3}) {
    omp_set_num_threads(threads);
    auto w = Random(kN, 14, 0.02f), m = Random(kN, 15, 1e-3f), v = Random(kN, 16, 1e-6f, true);
    AdamWUpdate(w.data(), m.data(), v.data(), g.data(), kN, a, 1e-3f, 0.999f);
    std::vector<float> dir(static_cast<size_t>(kN));
    MomentumDirection(dir.data(), m.data(), g.data(), kN, 0.9f, 1.0f, true);
    w.insert(w.end(), dir.begin(), dir.end());
    out.push_back(w);
  }
  EXPECT_TRUE(SameBits(out[0], out[1]));
}

}  // namespace
}  // namespace ablate::kernels
