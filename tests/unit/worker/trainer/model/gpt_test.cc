// Tests of the GPT model: config validation, parameter layout and init, the full backward pass
// against finite differences in double, float against double, determinism, the Loss path, the
// SageBwd model against the fpa model, diagnostics and the FLOP count.
#include "trainer/model/gpt.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace ablate::trainer {
namespace {

ModelConfig TinyConfig() {
  ModelConfig c;
  c.vocab_size = 24;
  c.seq_len = 8;
  c.layers = 2;
  c.d_model = 16;
  c.heads = 2;
  c.attention.kind = kernels::AttnKind::kFpa;
  return c;
}

std::vector<int32_t> RandomTokens(size_t n, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = int32_t(rng() % uint64_t(vocab));
  return t;
}

template <typename T>
Gpt<T> MakeModel(const ModelConfig& c, uint64_t seed) {
  StatusOr<Gpt<T>> g = Gpt<T>::Create(c);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  g->Init(seed);
  return std::move(g).value();
}

// Gains away from 1 so that the gain gradients and the normalized paths are not degenerate.
template <typename T>
void PerturbGains(Gpt<T>* g, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.5, 1.5);
  for (const ParamTensor& p : g->params()) {
    if (p.role != ParamRole::kVector) continue;
    for (size_t i = 0; i < p.numel(); ++i) g->weights()[p.offset + i] = T(u(rng));
  }
}

TEST(GptCreateTest, RejectsBadConfigs) {
  auto bad = [](auto mutate) {
    ModelConfig c = TinyConfig();
    mutate(c);
    StatusOr<Gpt<float>> g = Gpt<float>::Create(c);
    return !g.ok() && g.status().code() == StatusCode::kInvalidArgument;
  };
  EXPECT_TRUE(bad([](ModelConfig& c) { c.heads = 3; }));                  // 16 % 3 != 0
  EXPECT_TRUE(bad([](ModelConfig& c) { c.d_model = 18, c.heads = 6; }));  // D = 3, odd
  EXPECT_TRUE(bad([](ModelConfig& c) { c.layers = 0; }));
  EXPECT_TRUE(bad([](ModelConfig& c) { c.vocab_size = -1; }));
  EXPECT_TRUE(bad([](ModelConfig& c) { c.seq_len = 0; }));
  EXPECT_TRUE(bad([](ModelConfig& c) { c.attention.bkv = 0; }));
  EXPECT_TRUE(bad([](ModelConfig& c) { c.init_std = 0; }));
  EXPECT_TRUE(Gpt<float>::Create(TinyConfig()).ok());
}

TEST(GptParamsTest, LayoutIsContiguousWithRoles) {
  for (bool tied : {true, false}) {
    for (bool qkn : {true, false}) {
      ModelConfig c = TinyConfig();
      c.tie_embeddings = tied;
      c.qk_norm = qkn;
      Gpt<float> g = MakeModel<float>(c, 1);
      const int C = c.d_model, V = c.vocab_size, D = C / c.heads, L = c.layers;
      size_t expect = size_t(V) * C + size_t(L) * (12 * C * C + 2 * C + (qkn ? 2 * D : 0)) + C +
                      (tied ? 0 : size_t(V) * C);
      EXPECT_EQ(g.num_params(), expect);
      size_t off = 0;
      std::set<std::string> names;
      for (const ParamTensor& p : g.params()) {
        EXPECT_EQ(p.offset, off) << p.name;
        off += p.numel();
        EXPECT_TRUE(names.insert(p.name).second) << "duplicate " << p.name;
        EXPECT_EQ(p.role == ParamRole::kVector, p.rows == 1) << p.name;
      }
      EXPECT_EQ(off, g.num_params());
      EXPECT_EQ(g.FindParam("wte")->role, ParamRole::kEmbedding);
      EXPECT_EQ(g.FindParam("head") != nullptr, !tied);
      if (!tied) {
        EXPECT_EQ(g.FindParam("head")->role, ParamRole::kHead);
      }
      for (int l = 0; l < L; ++l) {
        const std::string p = "h." + std::to_string(l) + ".";
        const ParamTensor* wq = g.FindParam(p + "wq");
        const ParamTensor* wk = g.FindParam(p + "wk");
        const ParamTensor* wv = g.FindParam(p + "wv");
        ASSERT_TRUE(wq && wk && wv);
        EXPECT_EQ(wk->offset, wq->offset + size_t(C) * C);  // one (3C, C) QKV weight
        EXPECT_EQ(wv->offset, wk->offset + size_t(C) * C);
        for (const char* m : {"wq", "wk", "wv", "wo", "w_up", "w_down"}) {
          EXPECT_EQ(g.FindParam(p + m)->role, ParamRole::kHidden) << m;
        }
        EXPECT_EQ(g.FindParam(p + "w_up")->rows, 4 * C);
        EXPECT_EQ(g.FindParam(p + "w_down")->cols, 4 * C);
        EXPECT_EQ(g.FindParam(p + "q_gain") != nullptr, qkn);
        if (qkn) {
          EXPECT_EQ(g.FindParam(p + "k_gain")->cols, D);
        }
      }
    }
  }
}

TEST(GptInitTest, SeededScaledAndSharedBetweenFloatAndDouble) {
  ModelConfig c = TinyConfig();
  c.d_model = 64;
  c.heads = 4;
  c.vocab_size = 256;
  c.layers = 3;
  c.tie_embeddings = false;
  Gpt<double> a = MakeModel<double>(c, 42), b = MakeModel<double>(c, 42),
              d = MakeModel<double>(c, 43);
  Gpt<float> f = MakeModel<float>(c, 42);
  const size_t n = a.num_params();
  EXPECT_TRUE(std::equal(a.weights(), a.weights() + n, b.weights()));
  EXPECT_FALSE(std::equal(a.weights(), a.weights() + n, d.weights()));
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(f.weights()[i], float(a.weights()[i])) << i;
  auto stats = [&](const std::string& name, double* mean, double* std) {
    const ParamTensor* p = a.FindParam(name);
    double s = 0, s2 = 0;
    for (size_t i = 0; i < p->numel(); ++i) {
      const double w = a.weights()[p->offset + i];
      s += w;
      s2 += w * w;
    }
    *mean = s / p->numel();
    *std = std::sqrt(s2 / p->numel() - *mean * *mean);
  };
  double mean, std;
  for (const char* name : {"wte", "head", "h.0.wq", "h.2.w_up"}) {
    stats(name, &mean, &std);
    EXPECT_NEAR(mean, 0, 0.002) << name;
    EXPECT_NEAR(std, 0.02, 0.001) << name;
  }
  for (const char* name : {"h.1.wo", "h.2.w_down"}) {
    stats(name, &mean, &std);
    EXPECT_NEAR(std, 0.02 / std::sqrt(6.0), 0.0005) << name;
  }
  for (const char* name : {"h.0.ln1", "h.1.q_gain", "lnf"}) {
    const ParamTensor* p = a.FindParam(name);
    for (size_t i = 0; i < p->numel(); ++i) EXPECT_EQ(a.weights()[p->offset + i], 1.0) << name;
  }
}

TEST(GptTest, CheckTokens) {
  Gpt<float> g = MakeModel<float>(TinyConfig(), 1);
  std::vector<int32_t> t = {0, 5, 23};
  EXPECT_TRUE(g.CheckTokens(t.data(), 3).ok());
  t[1] = 24;
  EXPECT_EQ(g.CheckTokens(t.data(), 3).code(), StatusCode::kOutOfRange);
  t[1] = -1;
  EXPECT_FALSE(g.CheckTokens(t.data(), 3).ok());
}

// Full backward of Gpt<double> against central finite differences of the loss, on a random subset
// of the elements of every tensor, for every combination of qk_norm, MLP kind and tying.
class GptGradCheck : public ::testing::TestWithParam<std::tuple<bool, MlpKind, bool>> {};

TEST_P(GptGradCheck, BackwardMatchesFiniteDifferences) {
  ModelConfig c = TinyConfig();
  c.qk_norm = std::get<0>(GetParam());
  c.mlp = std::get<1>(GetParam());
  c.tie_embeddings = std::get<2>(GetParam());
  c.init_std = 0.3f;  // larger weights: the nonlinearities and attention are far from linear
  Gpt<double> g = MakeModel<double>(c, 7);
  PerturbGains(&g, 8);
  const int B = 2;
  const auto in = RandomTokens(size_t(B) * c.seq_len, c.vocab_size, 9);
  const auto tg = RandomTokens(size_t(B) * c.seq_len, c.vocab_size, 10);

  g.ZeroGrad();
  const double loss = g.Forward(in.data(), tg.data(), B);
  EXPECT_GT(loss, 1.0);
  g.Backward(1.0);
  const std::vector<double> grad(g.grads(), g.grads() + g.num_params());

  std::mt19937_64 rng(11);
  const double eps = 1e-5;
  double worst = 0;
  int checked = 0;
  for (const ParamTensor& p : g.params()) {
    double gmax = 0;
    for (size_t i = 0; i < p.numel(); ++i) gmax = std::max(gmax, std::abs(grad[p.offset + i]));
    ASSERT_GT(gmax, 0) << p.name << " has an all-zero gradient";
    for (int s = 0; s < 6; ++s) {
      const size_t i = p.offset + rng() % p.numel();
      double* w = g.weights() + i;
      const double w0 = *w;
      *w = w0 + eps;
      const double lp = g.Loss(in.data(), tg.data(), B);
      *w = w0 - eps;
      const double lm = g.Loss(in.data(), tg.data(), B);
      *w = w0;
      const double fd = (lp - lm) / (2 * eps);
      // Relative to the element, with a floor at a small fraction of the tensor's largest
      // gradient so that near-zero elements are not judged on roundoff alone.
      const double err = std::abs(fd - grad[i]) / std::max(std::abs(grad[i]), 1e-3 * gmax);
      worst = std::max(worst, err);
      ++checked;
      EXPECT_LT(err, 1e-5) << p.name << " element " << i - p.offset << ": fd " << fd << " analytic "
                           << grad[i];
    }
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3g", worst);
  RecordProperty("worst_rel_err", buf);
  RecordProperty("checked", checked);
}

INSTANTIATE_TEST_SUITE_P(GptVariants, GptGradCheck,
                         ::testing::Combine(::testing::Bool(),
                                            ::testing::Values(MlpKind::kGelu, MlpKind::kRelu2),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "QkNorm" : "NoQkNorm") +
                                  (std::get<1>(info.param) == MlpKind::kGelu ? "Gelu" : "Relu2") +
                                  (std::get<2>(info.param) ? "Tied" : "Untied");
                         });

TEST(GptTest, GradScaleAndAccumulation) {
  ModelConfig c = TinyConfig();
  Gpt<double> g = MakeModel<double>(c, 3);
  const int B = 3;
  const auto in = RandomTokens(size_t(B) * c.seq_len, c.vocab_size, 1);
  const auto tg = RandomTokens(size_t(B) * c.seq_len, c.vocab_size, 2);
  g.ZeroGrad();
  g.Forward(in.data(), tg.data(), B);
  g.Backward(1.0);
  const std::vector<double> once(g.grads(), g.grads() + g.num_params());
  g.ZeroGrad();
  for (int micro = 0; micro < 2; ++micro) {
    g.Forward(in.data(), tg.data(), B);
    g.Backward(0.5);
  }
  g.Backward(0.5);  // no pending Forward: a no-op
  for (size_t i = 0; i < g.num_params(); ++i) {
    ASSERT_NEAR(g.grads()[i], once[i], 1e-14 + 1e-12 * std::abs(once[i])) << i;
  }
}

double RelL2(const float* x, const double* y, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
    den += y[i] * y[i];
  }
  return std::sqrt(num / den);
}

TEST(GptTest, FloatAgreesWithDouble) {
  for (bool qkn : {true, false}) {
    ModelConfig c;
    c.vocab_size = 64;
    c.seq_len = 32;
    c.layers = 2;
    c.d_model = 32;
    c.heads = 4;
    c.qk_norm = qkn;
    c.tie_embeddings = !qkn;
    c.mlp = qkn ? MlpKind::kGelu : MlpKind::kRelu2;
    c.attention.kind = kernels::AttnKind::kFpa;
    c.init_std = 0.1f;
    Gpt<double> gd = MakeModel<double>(c, 5);
    Gpt<float> gf = MakeModel<float>(c, 5);
    const int B = 3;
    const auto in = RandomTokens(size_t(B) * c.seq_len, c.vocab_size, 6);
    const auto tg = RandomTokens(size_t(B) * c.seq_len, c.vocab_size, 7);
    gd.ZeroGrad();
    gf.ZeroGrad();
    const double ld = gd.Forward(in.data(), tg.data(), B);
    const float lf = gf.Forward(in.data(), tg.data(), B);
    EXPECT_NEAR(lf, ld, 2e-6 * ld);
    gd.Backward(1.0);
    gf.Backward(1.0f);
    for (const ParamTensor& p : gd.params()) {
      EXPECT_LT(RelL2(gf.grads() + p.offset, gd.grads() + p.offset, p.numel()), 1e-4) << p.name;
    }
  }
}

TEST(GptTest, DeterministicAndLossMatchesForward) {
  ModelConfig c = TinyConfig();
  c.seq_len = 16;
  c.d_model = 32;
  c.heads = 2;
  for (kernels::AttnKind kind : {kernels::AttnKind::kFpa, kernels::AttnKind::kSageBwd}) {
    c.attention.kind = kind;
    c.attention.bq = 8;
    c.attention.bkv = 4;
    Gpt<float> g = MakeModel<float>(c, 21);
    const int B = 4;
    const auto in = RandomTokens(size_t(B) * c.seq_len, c.vocab_size, 22);
    const auto tg = RandomTokens(size_t(B) * c.seq_len, c.vocab_size, 23);
    g.ZeroGrad();
    const float l1 = g.Forward(in.data(), tg.data(), B);
    g.Backward(1.0f);
    const std::vector<float> g1(g.grads(), g.grads() + g.num_params());
    g.ZeroGrad();
    const float l2 = g.Forward(in.data(), tg.data(), B);
    g.Backward(1.0f);
    EXPECT_EQ(l1, l2);
    EXPECT_TRUE(std::equal(g1.begin(), g1.end(), g.grads()));
    EXPECT_EQ(g.Loss(in.data(), tg.data(), B), l1);

    // Loss between Forward and Backward leaves the training state alone.
    const auto in2 = RandomTokens(size_t(B) * c.seq_len, c.vocab_size, 24);
    g.ZeroGrad();
    g.Forward(in.data(), tg.data(), B);
    const float l_other = g.Loss(in2.data(), tg.data(), B);
    EXPECT_NE(l_other, l1);
    g.Backward(1.0f);
    EXPECT_TRUE(std::equal(g1.begin(), g1.end(), g.grads()));

    // The batch may shrink and grow: a 2-sequence loss is the mean of the per-sequence losses.
    const float la = g.Loss(in.data(), tg.data(), 1);
    const float lb = g.Loss(in.data() + c.seq_len, tg.data() + c.seq_len, 1);
    const float lab = g.Forward(in.data(), tg.data(), 2);
    EXPECT_NEAR(lab, 0.5f * (la + lb), 1e-6f * lab);
    std::vector<int32_t> in8(in), tg8(tg);
    in8.insert(in8.end(), in.begin(), in.end());
    tg8.insert(tg8.end(), tg.begin(), tg.end());
    EXPECT_NEAR(g.Forward(in8.data(), tg8.data(), 2 * B), l1, 1e-6f * l1);
  }
}

// The OpenMP thread count does not change a bit (GEMMs stay on OpenBLAS's own threads).
TEST(GptTest, IndependentOfOpenMpThreadCount) {
  ModelConfig c = TinyConfig();
  c.seq_len = 32;
  c.d_model = 32;
  c.attention.bq = 16;
  c.attention.bkv = 8;
  c.attention.kind = kernels::AttnKind::kSageBwd;
  Gpt<float> g = MakeModel<float>(c, 61);
  const int B = 3;
  const auto in = RandomTokens(size_t(B) * c.seq_len, c.vocab_size, 62);
  const auto tg = RandomTokens(size_t(B) * c.seq_len, c.vocab_size, 63);
  const int saved = omp_get_max_threads();
  std::vector<float> losses;
  std::vector<std::vector<float>> grads;
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    g.ZeroGrad();
    losses.push_back(g.Forward(in.data(), tg.data(), B));
    g.Backward(1.0f);
    grads.emplace_back(g.grads(), g.grads() + g.num_params());
  }
  omp_set_num_threads(saved);
  for (int i = 1; i < 3; ++i) {
    EXPECT_EQ(losses[i], losses[0]);
    EXPECT_TRUE(grads[i] == grads[0]) << "threads " << i + 1;
  }
}

// The same weights under SageBwd and exact attention: the losses and gradients stay close (the
// attention tests cover the accuracy of SageBwd itself).
TEST(GptTest, SageModelCloseToFpa) {
  ModelConfig c;
  c.vocab_size = 64;
  c.seq_len = 64;
  c.layers = 2;
  c.d_model = 64;
  c.heads = 2;
  c.attention.bq = 32;
  c.attention.bkv = 16;
  c.init_std = 0.1f;
  c.attention.kind = kernels::AttnKind::kSageBwd;
  Gpt<float> sage = MakeModel<float>(c, 31);
  c.attention.kind = kernels::AttnKind::kFpa;
  Gpt<float> fpa = MakeModel<float>(c, 31);
  const int B = 2;
  const auto in = RandomTokens(size_t(B) * c.seq_len, c.vocab_size, 32);
  const auto tg = RandomTokens(size_t(B) * c.seq_len, c.vocab_size, 33);
  sage.ZeroGrad();
  fpa.ZeroGrad();
  const float ls = sage.Forward(in.data(), tg.data(), B);
  const float lf = fpa.Forward(in.data(), tg.data(), B);
  EXPECT_TRUE(std::isfinite(ls));
  EXPECT_NE(ls, lf);  // it really is a different attention
  EXPECT_NEAR(ls, lf, 1e-3 * lf);
  sage.Backward(1.0f);
  fpa.Backward(1.0f);
  std::vector<double> ref(fpa.grads(), fpa.grads() + fpa.num_params());
  for (const ParamTensor& p : fpa.params()) {
    EXPECT_LT(RelL2(sage.grads() + p.offset, ref.data() + p.offset, p.numel()), 0.05) << p.name;
  }
}

// attention.k_offset: exact attention ignores a key offset shared by a head's keys (its logits
// shift by one constant per row; dS's rows sum to 0), so the fpa model's loss and gradients do not
// move (up to float rounding); SageBwd's INT8 K sees it, and K-smoothing takes it away again.
TEST(GptTest, KeyOffsetLeavesExactAttentionAloneAndKSmoothingRemovesItFromSageBwd) {
  ModelConfig c;
  c.vocab_size = 64;
  c.seq_len = 64;
  c.layers = 2;
  c.d_model = 128;
  c.heads = 2;
  c.init_std = 0.1f;
  const int B = 2;
  const auto in = RandomTokens(size_t(B) * c.seq_len, c.vocab_size, 32);
  const auto tg = RandomTokens(size_t(B) * c.seq_len, c.vocab_size, 33);
  struct Run {
    double loss;
    std::vector<float> grads;
  };
  auto run = [&](kernels::AttnKind kind, float offset, bool smooth_k) {
    ModelConfig m = c;
    m.attention.kind = kind;
    m.attention.smooth_k = smooth_k;
    m.attention = kernels::SageGpuTiles(m.attention, 64);
    m.k_offset = offset;
    Gpt<float> g = MakeModel<float>(m, 31);
    g.ZeroGrad();
    Run r{g.Forward(in.data(), tg.data(), B), {}};
    g.Backward(1.0f);
    r.grads.assign(g.grads(), g.grads() + g.num_params());
    return r;
  };
  const Run fpa0 = run(kernels::AttnKind::kFpa, 0, true),
            fpa = run(kernels::AttnKind::kFpa, 8, true);
  const std::vector<double> ref(fpa0.grads.begin(), fpa0.grads.end());
  EXPECT_NEAR(fpa.loss, fpa0.loss, 1e-5 * fpa0.loss);
  EXPECT_LT(RelL2(fpa.grads.data(), ref.data(), ref.size()), 1e-3);
  // SageBwd against the fpa reference: the offset's damage without smoothing, none with it.
  auto err = [&](const Run& r) { return RelL2(r.grads.data(), ref.data(), ref.size()); };
  const double plain0 = err(run(kernels::AttnKind::kSageBwd, 0, false));
  const double plain = err(run(kernels::AttnKind::kSageBwd, 8, false));
  const double smooth = err(run(kernels::AttnKind::kSageBwd, 8, true));
  EXPECT_GT(plain, 2 * plain0);
  EXPECT_LT(smooth, 0.5 * plain);
  std::printf("gradient rel L2 vs fpa: sagebwd unsmoothed %.4f (no offset %.4f), K-smoothed %.4f\n",
              plain, plain0, smooth);
  ModelConfig bad = c;
  bad.k_offset = -1;
  EXPECT_FALSE(Gpt<float>::Create(bad).ok());
}

TEST(GptTest, AttentionDiagnostics) {
  for (bool qkn : {true, false}) {
    ModelConfig c;
    c.vocab_size = 64;
    c.seq_len = 64;
    c.layers = 3;
    c.d_model = 64;
    c.heads = 2;
    c.qk_norm = qkn;
    c.attention.bq = 32;
    c.attention.bkv = 16;
    c.attention.kind = kernels::AttnKind::kSageBwd;
    Gpt<float> g = MakeModel<float>(c, 41);
    const int B = 3;
    const auto in = RandomTokens(size_t(B) * c.seq_len, c.vocab_size, 42);
    const auto tg = RandomTokens(size_t(B) * c.seq_len, c.vocab_size, 43);
    EXPECT_EQ(g.AttentionDiagnostics().status().code(), StatusCode::kFailedPrecondition);
    g.ZeroGrad();
    g.Forward(in.data(), tg.data(), B);
    EXPECT_EQ(g.AttentionDiagnostics().status().code(), StatusCode::kFailedPrecondition);
    g.Backward(1.0f);
    auto diag = g.AttentionDiagnostics(2);
    ASSERT_TRUE(diag.ok()) << diag.status().ToString();
    ASSERT_EQ(diag->size(), size_t(c.layers));

    for (int l = 0; l < c.layers; ++l) {
      const auto& d = (*diag)[l];
      EXPECT_EQ(d.layer, l);
      for (const kernels::ErrorStats* e : {&d.o, &d.dq, &d.dk, &d.dv, &d.p, &d.ds}) {
        EXPECT_GT(e->cosine, 0.99) << "layer " << l;
        EXPECT_LE(e->cosine, 1.0 + 1e-9) << "layer " << l;
        EXPECT_LT(e->rel_l2, 0.15) << "layer " << l;
        EXPECT_GE(e->rel_l2, 0.0);
      }
      EXPECT_GT(d.max_logit, 0.0);
      EXPECT_TRUE(std::isfinite(d.max_logit));
      if (qkn) {
        EXPECT_DOUBLE_EQ(d.q_gain_mean, 1.0);
        EXPECT_DOUBLE_EQ(d.k_gain_mean, 1.0);
        // With unit gains QK-norm bounds |q|, |k| by sqrt(D): tau q.k <= sqrt(D).
        EXPECT_LE(d.max_logit, std::sqrt(32.0) + 1e-4);
      } else {
        EXPECT_EQ(d.q_gain_mean, 0.0);
      }
    }
    // Doubling the QK-norm gains of layer 0 scales its logits by 4 (RMS-normalized q and k, so
    // the rest of the network does not change the max logit's position).
    if (qkn) {
      const double before = (*diag)[0].max_logit;
      for (const char* name : {"h.0.q_gain", "h.0.k_gain"}) {
        const ParamTensor* p = g.FindParam(name);
        for (size_t i = 0; i < p->numel(); ++i) g.weights()[p->offset + i] *= 2.0f;
      }
      g.Forward(in.data(), tg.data(), B);
      g.Backward(1.0f);
      auto diag2 = g.AttentionDiagnostics(1);
      ASSERT_TRUE(diag2.ok());
      EXPECT_NEAR((*diag2)[0].max_logit, 4 * before, 1e-4 * before);
      EXPECT_DOUBLE_EQ((*diag2)[0].q_gain_mean, 2.0);
    }
  }
}

// Layer 0's max logit recomputed naively in double from the weights: q, k = RoPE(RMSNorm(wte[x])
// wq^T / wk^T), max over the causal pairs of tau q_i . k_j.
TEST(GptTest, MaxLogitMatchesNaiveRecomputation) {
  ModelConfig c;
  c.vocab_size = 32;
  c.seq_len = 24;
  c.layers = 2;
  c.d_model = 32;
  c.heads = 2;
  c.qk_norm = false;
  c.attention.kind = kernels::AttnKind::kFpa;
  c.init_std = 0.2f;
  Gpt<float> g = MakeModel<float>(c, 51);
  const int B = 2, Tn = c.seq_len, C = c.d_model, H = c.heads, D = C / H;
  const auto in = RandomTokens(size_t(B) * Tn, c.vocab_size, 52);
  const auto tg = RandomTokens(size_t(B) * Tn, c.vocab_size, 53);
  g.Forward(in.data(), tg.data(), B);
  g.Backward(1.0f);
  auto diag = g.AttentionDiagnostics();
  ASSERT_TRUE(diag.ok());

  const float* w = g.weights();
  const float* wte = w + g.FindParam("wte")->offset;
  const float* wq = w + g.FindParam("h.0.wq")->offset;
  const float* wk = w + g.FindParam("h.0.wk")->offset;
  std::vector<double> q(size_t(B) * Tn * C), k(q.size());
  for (int r = 0; r < B * Tn; ++r) {
    const float* x = wte + size_t(in[r]) * C;
    double ms = 0;
    for (int i = 0; i < C; ++i) ms += double(x[i]) * x[i] / C;
    const double rs = 1 / std::sqrt(ms + 1e-6);
    for (int o = 0; o < C; ++o) {
      double sq = 0, sk = 0;
      for (int i = 0; i < C; ++i) {
        sq += x[i] * rs * wq[o * C + i];
        sk += x[i] * rs * wk[o * C + i];
      }
      q[size_t(r) * C + o] = sq;
      k[size_t(r) * C + o] = sk;
    }
  }
  auto rope = [&](std::vector<double>& v, int r, int h) {  // in place on head h of token row r
    const int t = r % Tn;
    double* x = v.data() + size_t(r) * C + h * D;
    for (int i = 0; i < D / 2; ++i) {
      const double th = t * std::pow(10000.0, -2.0 * i / D);
      const double a = x[i], b = x[i + D / 2];
      x[i] = a * std::cos(th) - b * std::sin(th);
      x[i + D / 2] = a * std::sin(th) + b * std::cos(th);
    }
  };
  for (int r = 0; r < B * Tn; ++r) {
    for (int h = 0; h < H; ++h) {
      rope(q, r, h);
      rope(k, r, h);
    }
  }
  double causal = -1e300;
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < H; ++h) {
      for (int i = 0; i < Tn; ++i) {
        for (int j = 0; j <= i; ++j) {
          double s = 0;
          for (int d = 0; d < D; ++d) {
            s += q[(size_t(b) * Tn + i) * C + h * D + d] * k[(size_t(b) * Tn + j) * C + h * D + d];
          }
          s /= std::sqrt(double(D));
          causal = std::max(causal, s);
        }
      }
    }
  }
  EXPECT_NEAR((*diag)[0].max_logit, causal, 1e-5 * std::abs(causal));
}

TEST(GptTest, FlopsPerToken) {
  ModelConfig c;  // V 256, T 256, L 4, C 256
  Gpt<float> g = Gpt<float>::Create(c).value();
  const double n_matmul = 4.0 * 12 * 256 * 256 + 256.0 * 256;
  EXPECT_DOUBLE_EQ(g.FlopsPerToken(), 6 * n_matmul + 6.0 * 4 * 256 * 256);
}

}  // namespace
}  // namespace ablate::trainer
