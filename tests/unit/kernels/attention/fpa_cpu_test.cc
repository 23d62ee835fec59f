// FPA (exact attention) on the CPU: forward against naive float64 loops, backward against central
// finite differences, float against double, the intermediates, and head chunking.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "attention/attention_cpu.h"
#include "attention_test_util.h"

namespace ablate::kernels {
namespace {

using testing::Inputs;
using testing::MakeInputs;

// Naive float64 attention of one (b, h): o (N, D) and lse (N).
void NaiveForwardHead(int N, int D, bool causal, const double* q, const double* k, const double* v,
                      double* o, double* lse) {
  const double tau = 1.0 / std::sqrt(double(D));
  for (int i = 0; i < N; ++i) {
    const int n = causal ? i + 1 : N;
    std::vector<double> s(n);
    double m = -std::numeric_limits<double>::infinity();
    for (int j = 0; j < n; ++j) {
      double dot = 0;
      for (int d = 0; d < D; ++d) dot += q[i * D + d] * k[j * D + d];
      s[j] = tau * dot;
      m = std::max(m, s[j]);
    }
    double l = 0;
    for (int j = 0; j < n; ++j) l += std::exp(s[j] - m);
    for (int d = 0; d < D; ++d) {
      double acc = 0;
      for (int j = 0; j < n; ++j) acc += std::exp(s[j] - m) / l * v[j * D + d];
      o[i * D + d] = acc;
    }
    lse[i] = m + std::log(l);
  }
}

class FpaCausalTest : public ::testing::TestWithParam<bool> {};

TEST_P(FpaCausalTest, ForwardMatchesNaiveLoops) {
  const AttnShape s{.B = 2, .H = 3, .N = 37, .D = 16, .causal = GetParam()};
  const Inputs in = MakeInputs(s, 1.5, 11);
  std::vector<double> o(s.numel()), lse(s.rows()), o_ref(s.numel()), lse_ref(s.rows());
  FpaForward<double>(s, in.q.data(), in.k.data(), in.v.data(), o.data(), lse.data());
  const int64_t nd = int64_t(s.N) * s.D;
  for (int bh = 0; bh < s.B * s.H; ++bh) {
    NaiveForwardHead(s.N, s.D, s.causal, in.q.data() + bh * nd, in.k.data() + bh * nd,
                     in.v.data() + bh * nd, o_ref.data() + bh * nd, lse_ref.data() + bh * s.N);
  }
  for (int64_t x = 0; x < s.numel(); ++x) ASSERT_NEAR(o[x], o_ref[x], 1e-12) << x;
  for (int64_t x = 0; x < s.rows(); ++x) ASSERT_NEAR(lse[x], lse_ref[x], 1e-12) << x;
}

// dL/dX for L = sum(O o R) by central differences against FpaBackward with dO = R.
TEST_P(FpaCausalTest, BackwardMatchesFiniteDifferences) {
  const AttnShape s{.B = 1, .H = 2, .N = 7, .D = 5, .causal = GetParam()};
  Inputs in = MakeInputs(s, 1.0, 12);
  const std::vector<double>& r = in.dout;  // the loss weights R double as dL/dO
  std::vector<double> o(s.numel()), lse(s.rows()), dq(s.numel()), dk(s.numel()), dv(s.numel());
  FpaForward<double>(s, in.q.data(), in.k.data(), in.v.data(), o.data(), lse.data());
  FpaBackward<double>(s, in.q.data(), in.k.data(), in.v.data(), o.data(), lse.data(), r.data(),
                      dq.data(), dk.data(), dv.data());

  auto loss = [&]() {
    std::vector<double> oo(s.numel()), ll(s.rows());
    FpaForward<double>(s, in.q.data(), in.k.data(), in.v.data(), oo.data(), ll.data());
    double acc = 0;
    for (int64_t x = 0; x < s.numel(); ++x) acc += oo[x] * r[x];
    return acc;
  };
  const double h = 1e-5;
  struct Case {
    const char* name;
    std::vector<double>* x;
    const std::vector<double>* grad;
  } cases[] = {{"q", &in.q, &dq}, {"k", &in.k, &dk}, {"v", &in.v, &dv}};
  double worst = 0;
  for (const Case& c : cases) {
    for (int64_t x = 0; x < s.numel(); ++x) {
      const double keep = (*c.x)[x];
      (*c.x)[x] = keep + h;
      const double lp = loss();
      (*c.x)[x] = keep - h;
      const double lm = loss();
      (*c.x)[x] = keep;
      const double fd = (lp - lm) / (2 * h);
      const double err = std::fabs(fd - (*c.grad)[x]);
      worst = std::max(worst, err);
      ASSERT_LT(err, 1e-8 * (1 + std::fabs(fd)))
          << c.name << "[" << x << "] fd=" << fd << " analytic=" << (*c.grad)[x];
    }
  }
  std::printf("fpa backward vs finite differences (causal=%d): max abs error %.2e\n", s.causal,
              worst);
}

TEST_P(FpaCausalTest, FloatMatchesDouble) {
  const AttnShape s{.B = 2, .H = 2, .N = 300, .D = 64, .causal = GetParam()};
  const Inputs in = MakeInputs(s, 1.0, 13);
  const testing::Result ref = testing::RunFpa(in);
  const auto q = testing::Cast<float>(in.q), k = testing::Cast<float>(in.k);
  const auto v = testing::Cast<float>(in.v), dout = testing::Cast<float>(in.dout);
  std::vector<float> o(s.numel()), lse(s.rows()), dq(s.numel()), dk(s.numel()), dv(s.numel());
  FpaForward<float>(s, q.data(), k.data(), v.data(), o.data(), lse.data());
  FpaBackward<float>(s, q.data(), k.data(), v.data(), o.data(), lse.data(), dout.data(), dq.data(),
                     dk.data(), dv.data());
  const int64_t n = s.numel();
  const ErrorStats eo = CompareTensors(o.data(), ref.o.data(), n);
  const ErrorStats eq = CompareTensors(dq.data(), ref.dq.data(), n);
  const ErrorStats ek = CompareTensors(dk.data(), ref.dk.data(), n);
  const ErrorStats ev = CompareTensors(dv.data(), ref.dv.data(), n);
  const ErrorStats el = CompareTensors(lse.data(), ref.lse.data(), s.rows());
  std::printf("fpa<float> vs fpa<double> rel L2: o %.2e dq %.2e dk %.2e dv %.2e lse %.2e\n",
              eo.rel_l2, eq.rel_l2, ek.rel_l2, ev.rel_l2, el.rel_l2);
  for (const ErrorStats& e : {eo, eq, ek, ev, el}) EXPECT_LT(e.rel_l2, 2e-6);
}

// P and dS from FpaIntermediates reproduce the gradients through naive products:
// dV = P^T dO, dQ = tau dS K, dK = tau dS^T Q; P rows sum to one and hide the future.
TEST_P(FpaCausalTest, IntermediatesReproduceGradients) {
  const AttnShape s{.B = 1, .H = 2, .N = 45, .D = 8, .causal = GetParam()};
  const Inputs in = MakeInputs(s, 1.0, 14);
  const testing::Result ref = testing::RunFpa(in);
  std::vector<double> p, ds;
  FpaIntermediates<double>(s, in.q.data(), in.k.data(), in.v.data(), ref.o.data(), ref.lse.data(),
                           in.dout.data(), &p, &ds);
  const int N = s.N, D = s.D;
  ASSERT_EQ(p.size(), size_t(s.B) * s.H * N * N);
  ASSERT_EQ(ds.size(), p.size());
  const double tau = 1.0 / std::sqrt(double(D));
  for (int bh = 0; bh < s.B * s.H; ++bh) {
    const double* ph = p.data() + int64_t(bh) * N * N;
    const double* dsh = ds.data() + int64_t(bh) * N * N;
    const int64_t off = int64_t(bh) * N * D;
    for (int i = 0; i < N; ++i) {
      double rowsum = 0;
      for (int j = 0; j < N; ++j) {
        rowsum += ph[i * N + j];
        if (s.causal && j > i) {
          ASSERT_EQ(ph[i * N + j], 0.0);
          ASSERT_EQ(dsh[i * N + j], 0.0);
        }
      }
      ASSERT_NEAR(rowsum, 1.0, 1e-12);
    }
    for (int i = 0; i < N; ++i) {
      for (int d = 0; d < D; ++d) {
        double dv = 0, dq = 0, dk = 0;
        for (int j = 0; j < N; ++j) {
          dv += ph[j * N + i] * in.dout[off + j * D + d];
          dq += tau * dsh[i * N + j] * in.k[off + j * D + d];
          dk += tau * dsh[j * N + i] * in.q[off + j * D + d];
        }
        ASSERT_NEAR(dv, ref.dv[off + i * D + d], 1e-12);
        ASSERT_NEAR(dq, ref.dq[off + i * D + d], 1e-12);
        ASSERT_NEAR(dk, ref.dk[off + i * D + d], 1e-12);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Masking, FpaCausalTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Causal" : "Full"; });

// Enough heads of N = 1024 to need several scratch chunks: every head must equal a lone call.
TEST(FpaTest, ChunkedHeadsEqualSingleHeadCalls) {
  const AttnShape s{.B = 3, .H = 4, .N = 1024, .D = 8, .causal = true};
  const Inputs in = MakeInputs(s, 1.0, 15);
  const testing::Result all = testing::RunFpa(in);
  const int64_t nd = int64_t(s.N) * s.D;
  for (int bh : {0, 7, 11}) {
    Inputs one;
    one.s = AttnShape{.B = 1, .H = 1, .N = s.N, .D = s.D, .causal = s.causal};
    auto slice = [&](const std::vector<double>& x) {
      return std::vector<double>(x.begin() + bh * nd, x.begin() + (bh + 1) * nd);
    };
    one.q = slice(in.q);
    one.k = slice(in.k);
    one.v = slice(in.v);
    one.dout = slice(in.dout);
    const testing::Result r = testing::RunFpa(one);
    for (int64_t x = 0; x < nd; ++x) {
      ASSERT_EQ(r.o[x], all.o[bh * nd + x]);
      ASSERT_EQ(r.dq[x], all.dq[bh * nd + x]);
      ASSERT_EQ(r.dk[x], all.dk[bh * nd + x]);
      ASSERT_EQ(r.dv[x], all.dv[bh * nd + x]);
    }
    for (int x = 0; x < s.N; ++x) ASSERT_EQ(r.lse[x], all.lse[bh * s.N + x]);
  }
}

TEST(CompareTensorsTest, KnownValues) {
  const double y[] = {1, 2, 2};
  const double x[] = {1, 2, 3};
  const ErrorStats e = CompareTensors(x, y, 3);
  EXPECT_NEAR(e.rel_l2, 1.0 / 3.0, 1e-15);
  EXPECT_NEAR(e.rel_l1, 1.0 / 5.0, 1e-15);
  EXPECT_NEAR(e.cosine, 11.0 / (3.0 * std::sqrt(14.0)), 1e-15);
  const float zf[] = {0, 0, 0};
  const ErrorStats z = CompareTensors(zf, zf, 3);
  EXPECT_EQ(z.cosine, 1.0);
  EXPECT_EQ(z.rel_l2, 0.0);
  const float xf[] = {1, 0, 0};
  EXPECT_TRUE(std::isinf(CompareTensors(xf, zf, 3).rel_l2));
}

}  // namespace
}  // namespace ablate::kernels
