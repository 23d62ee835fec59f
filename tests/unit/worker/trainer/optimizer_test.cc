#include "trainer/optim/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>

#include "trainer/loop/schedule.h"

namespace ablate::trainer {
namespace {

std::vector<ParamTensor> Layout() {
  // wte (12, 8) embedding, a hidden (16, 8) matrix, a (1, 8) gain.
  return {{"wte", 12, 8, 0, ParamRole::kEmbedding},
          {"h.0.w", 16, 8, 96, ParamRole::kHidden},
          {"h.0.g", 1, 8, 224, ParamRole::kVector}};
}
constexpr size_t kN = 232;

std::vector<float> Random(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

TEST(Optimizer, AdamWMatchesHandComputedDouble) {
  config::OptimizerSection c;
  c.kind = "adamw";
  c.lr = 1e-2;
  c.lr_vector = 3e-3;
  c.weight_decay = 0.1;
  auto opt = Optimizer::Create(c, Layout(), kN);
  ASSERT_TRUE(opt.ok());
  auto w = Random(kN, 1);
  std::vector<double> wd(w.begin(), w.end()), m(kN, 0), v(kN, 0);
  for (int step = 1; step <= 3; ++step) {
    auto g = Random(kN, 100 + step);
    ASSERT_TRUE((*opt)->Step(w.data(), g.data(), step, 0.5, 0.0, nullptr).ok());
    for (size_t i = 0; i < kN; ++i) {
      bool vec = i >= 224;
      double lr = (vec ? c.lr_vector : c.lr) * 0.5;
      if (!vec) wd[i] *= 1 - lr * c.weight_decay;
      m[i] = c.beta1 * m[i] + (1 - c.beta1) * g[i];
      v[i] = c.beta2 * v[i] + (1 - c.beta2) * double(g[i]) * g[i];
      double mh = m[i] / (1 - std::pow(c.beta1, step)), vh = v[i] / (1 - std::pow(c.beta2, step));
      wd[i] -= lr * mh / (std::sqrt(vh) + c.eps);
    }
  }
  for (size_t i = 0; i < kN; ++i) EXPECT_NEAR(w[i], wd[i], 1e-5) << i;
}

TEST(Optimizer, SpectralRmsAtPOneIsAdamOnMatrices) {
  config::OptimizerSection s;
  s.kind = "spectral";
  s.family = "rms";
  s.lr = 1e-2;
  s.spectral_embeddings = true;
  config::OptimizerSection a = s;
  a.kind = "adamw";
  a.lr_vector = s.lr_vector;
  auto os = Optimizer::Create(s, Layout(), kN);
  auto oa = Optimizer::Create(a, Layout(), kN);
  ASSERT_TRUE(os.ok() && oa.ok());
  EXPECT_EQ((*os)->spectral_tensors(), 2);
  auto ws = Random(kN, 2), wa = ws;
  for (int step = 1; step <= 4; ++step) {
    auto g = Random(kN, 200 + step);
    ASSERT_TRUE((*os)->Step(ws.data(), g.data(), step, 1.0, 1.0, nullptr).ok());
    ASSERT_TRUE((*oa)->Step(wa.data(), g.data(), step, 1.0, 1.0, nullptr).ok());
  }
  for (size_t i = 0; i < kN; ++i) EXPECT_NEAR(ws[i], wa[i], 1e-6) << i;
}

TEST(Optimizer, GroupsFollowRolesAndSwitch) {
  config::OptimizerSection c;
  auto o = Optimizer::Create(c, Layout(), kN);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ((*o)->spectral_tensors(), 1);  // only the hidden matrix
  c.spectral_embeddings = true;
  auto o2 = Optimizer::Create(c, Layout(), kN);
  EXPECT_EQ((*o2)->spectral_tensors(), 2);
}

TEST(Optimizer, MuonUpdateIsNearlyOrthogonalAndScaled) {
  config::OptimizerSection c;
  c.family = "momentum";
  c.lr = 0.1;
  c.ns_steps = 15;
  auto o = Optimizer::Create(c, Layout(), kN);
  ASSERT_TRUE(o.ok());
  std::vector<float> w(kN, 0.0f);
  auto g = Random(kN, 3);
  OptimizerStats st;
  ASSERT_TRUE((*o)->Step(w.data(), g.data(), 1, 1.0, 0.0, &st).ok());
  EXPECT_EQ(st.psi_route, "newton_schulz");
  // The hidden (16, 8) update is -lr * sqrt(16/8) * polar(g): its columns have norm ~ lr*sqrt2
  // (NS leaves singular values in ~[0.7, 1.2]).
  const float* u = w.data() + 96;
  for (int j = 0; j < 8; ++j) {
    double s = 0;
    for (int i = 0; i < 16; ++i) s += double(u[i * 8 + j]) * u[i * 8 + j];
    EXPECT_NEAR(std::sqrt(s) / (0.1 * std::sqrt(2.0)), 1.0, 0.35) << j;
  }
  // Update RMS of the spectral group equals what was applied.
  double sq = 0;
  for (int i = 0; i < 128; ++i) sq += double(u[i]) * u[i];
  EXPECT_NEAR(st.update_rms_spectral, std::sqrt(sq / 128), 1e-6);
}

TEST(Optimizer, MomentumFamilySumMomentum) {
  config::OptimizerSection c;
  c.family = "momentum";
  c.lr = 1.0;
  c.momentum = 0.9;
  auto o = Optimizer::Create(c, Layout(), kN);
  ASSERT_TRUE(o.ok());
  std::vector<float> w(kN, 0.0f);
  auto g = Random(kN, 4);
  // p = 1: Psi is the identity, so the matrix update is exactly lr * B with B = g, then 0.9 g + g.
  ASSERT_TRUE((*o)->Step(w.data(), g.data(), 1, 1.0, 1.0, nullptr).ok());
  ASSERT_TRUE((*o)->Step(w.data(), g.data(), 2, 1.0, 1.0, nullptr).ok());
  for (size_t i = 96; i < 224; ++i) EXPECT_NEAR(w[i], -(1.0 + 1.9) * g[i], 1e-5);
}

TEST(Optimizer, EightBitStateSavesMemoryAndTracksFp32) {
  config::OptimizerSection c32;
  c32.family = "rms";
  c32.p = 0.5;
  config::OptimizerSection c8 = c32;
  c8.state_bits = 8;
  // A bigger matrix so the state dominates.
  std::vector<ParamTensor> L = {{"h.0.w", 256, 64, 0, ParamRole::kHidden}};
  auto o32 = Optimizer::Create(c32, L, 256 * 64);
  auto o8 = Optimizer::Create(c8, L, 256 * 64);
  ASSERT_TRUE(o32.ok() && o8.ok());
  double saved = 1.0 - double((*o8)->state_bytes()) / (*o32)->state_bytes();
  EXPECT_GT(saved, 0.74);
  EXPECT_EQ((*o8)->state_bytes_fp32(), (*o32)->state_bytes());
  auto w32 = Random(256 * 64, 5, 0.02f), w8 = w32;
  for (int step = 1; step <= 20; ++step) {
    auto g = Random(256 * 64, 500 + step);
    ASSERT_TRUE((*o32)->Step(w32.data(), g.data(), step, 1.0, 0.5, nullptr).ok());
    ASSERT_TRUE((*o8)->Step(w8.data(), g.data(), step, 1.0, 0.5, nullptr).ok());
  }
  double num = 0, den = 0, w0 = 0;
  auto init = Random(256 * 64, 5, 0.02f);
  for (size_t i = 0; i < w8.size(); ++i) {
    num += std::pow(w8[i] - w32[i], 2);
    den += std::pow(w32[i] - init[i], 2);
    w0 += 1;
  }
  // The 8-bit trajectory stays within a few percent of the fp32 one (relative to the distance moved).
  EXPECT_LT(std::sqrt(num / den), 0.05);
}

// The second moment's code (state_quant_v). A constant gradient whose odd coordinates are 30x
// smaller than the even ones: under the linear code their v (relative to the block's absmax,
// ~1e-3) is below its resolution (1/510) and decodes to 0, so each step's v is only the fresh
// (1 - beta2) g^2 and the small coordinates move several times further than with fp32 state; the
// dynamic code resolves them and tracks fp32.
TEST(Optimizer, LinearSecondMomentInflatesSmallCoordinates) {
  std::vector<ParamTensor> L = {{"h.0.w", 64, 64, 0, ParamRole::kHidden}};
  const size_t n = 64 * 64;
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i) g[i] = (i % 3 == 0 ? -1.0f : 1.0f) * (i % 2 == 0 ? 1.0f : 0.03f);
  auto small_moved = [&](int bits, const char* quant_v) {
    config::OptimizerSection c;
    c.kind = "adamw";
    c.lr = 1e-3;
    c.state_bits = bits;
    c.state_quant = "linear";
    c.state_quant_v = quant_v;
    auto o = Optimizer::Create(c, L, n);
    EXPECT_TRUE(o.ok());
    std::vector<float> w(n, 0.0f);
    for (int step = 1; step <= 20; ++step) {
      EXPECT_TRUE((*o)->Step(w.data(), g.data(), step, 1.0, 1.0, nullptr).ok());
    }
    double moved = 0;
    for (size_t i = 1; i < n; i += 2) moved += std::fabs(w[i]);
    return moved;
  };
  const double fp32 = small_moved(32, "dynamic");
  const double dynamic = small_moved(8, "dynamic");
  const double linear = small_moved(8, "linear");
  EXPECT_NEAR(dynamic / fp32, 1.0, 0.1);  // 1.04: the linear m's rounding of the small ones
  EXPECT_GT(linear / fp32, 2.0);
  std::printf("small coordinates moved, relative to fp32 state: dynamic v %.3f, linear v %.3f\n",
              dynamic / fp32, linear / fp32);
}

TEST(Optimizer, SaveLoadContinuesIdentically) {
  for (int bits : {32, 8}) {
    config::OptimizerSection c;
    c.state_bits = bits;
    c.weight_decay = 0.01;
    auto a = Optimizer::Create(c, Layout(), kN);
    auto b = Optimizer::Create(c, Layout(), kN);
    ASSERT_TRUE(a.ok() && b.ok());
    auto wa = Random(kN, 6);
    for (int step = 1; step <= 3; ++step) {
      auto g = Random(kN, 600 + step);
      ASSERT_TRUE((*a)->Step(wa.data(), g.data(), step, 1.0, 0.5, nullptr).ok());
    }
    ASSERT_TRUE((*b)->Load((*a)->Save()).ok());
    auto wb = wa;
    for (int step = 4; step <= 6; ++step) {
      auto g = Random(kN, 600 + step);
      ASSERT_TRUE((*a)->Step(wa.data(), g.data(), step, 1.0, 0.5, nullptr).ok());
      ASSERT_TRUE((*b)->Step(wb.data(), g.data(), step, 1.0, 0.5, nullptr).ok());
    }
    EXPECT_EQ(wa, wb) << "bits " << bits;
  }
}

TEST(Optimizer, LoadRejectsOtherLayout) {
  config::OptimizerSection c;
  auto a = Optimizer::Create(c, Layout(), kN);
  c.family = "momentum";
  auto b = Optimizer::Create(c, Layout(), kN);
  Status st = (*b)->Load((*a)->Save());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("another optimizer config"), std::string::npos);
}

TEST(Optimizer, GeneralPUsesEighAndDyadicUsesNewton) {
  config::OptimizerSection c;
  auto o = Optimizer::Create(c, Layout(), kN);
  std::vector<float> w(kN, 0.0f);
  auto g = Random(kN, 7);
  OptimizerStats st;
  ASSERT_TRUE((*o)->Step(w.data(), g.data(), 1, 1.0, 0.5, &st).ok());
  EXPECT_EQ(st.psi_route, "coupled_newton");
  EXPECT_GT(st.newton_residual, 0.0);
  EXPECT_LT(st.newton_residual, 1e-2);
  ASSERT_TRUE((*o)->Step(w.data(), g.data(), 2, 1.0, 0.3, &st).ok());
  EXPECT_EQ(st.psi_route, "eigh");
}

TEST(Schedule, WarmupCosineLinearWsd) {
  EXPECT_DOUBLE_EQ(LrMultiplier("cosine", 1, 100, 10, 0.0, 0.2), 0.1);
  EXPECT_DOUBLE_EQ(LrMultiplier("cosine", 10, 100, 10, 0.0, 0.2), 1.0);
  EXPECT_NEAR(LrMultiplier("cosine", 55, 100, 10, 0.0, 0.2), 0.5, 1e-12);
  EXPECT_NEAR(LrMultiplier("cosine", 100, 100, 10, 0.1, 0.2), 0.1, 1e-12);
  EXPECT_NEAR(LrMultiplier("linear", 55, 100, 10, 0.0, 0.2), 0.5, 1e-12);
  EXPECT_DOUBLE_EQ(LrMultiplier("wsd", 80, 100, 10, 0.0, 0.2), 1.0);
  EXPECT_NEAR(LrMultiplier("wsd", 90, 100, 10, 0.0, 0.2), 0.5, 1e-12);
  EXPECT_DOUBLE_EQ(LrMultiplier("constant", 90, 100, 10, 0.0, 0.2), 1.0);
  EXPECT_DOUBLE_EQ(PowerAt("constant", 5, 10, 0.5, 0.0), 0.5);
  EXPECT_DOUBLE_EQ(PowerAt("linear", 1, 11, 0.5, -0.1), 0.5);
  EXPECT_NEAR(PowerAt("linear", 6, 11, 0.5, -0.1), 0.2, 1e-12);
  EXPECT_NEAR(PowerAt("cosine", 11, 11, 0.5, -0.1), -0.1, 1e-12);
}

}  // namespace
}  // namespace ablate::trainer
