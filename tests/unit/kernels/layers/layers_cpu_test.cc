// Tests of kernels/layers: every backward against central finite differences in double, forwards
// against naive float64 formulas, float against double, accumulation and determinism.
#include "layers/layers_cpu.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

namespace ablate::kernels {
namespace {

using Vec = std::vector<double>;

Vec RandomVec(size_t n, uint64_t seed, double scale = 1.0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd(0.0, scale);
  Vec v(n);
  for (double& x : v) x = nd(rng);
  return v;
}

std::vector<float> ToFloat(const Vec& v) { return std::vector<float>(v.begin(), v.end()); }

double Dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Central differences of the scalar f at every element of x, against the analytic gradient g.
void ExpectGradMatches(const std::function<double()>& f, Vec* x, const Vec& g, const char* what,
                       double eps = 1e-6, double tol = 1e-6) {
  ASSERT_EQ(x->size(), g.size());
  double worst = 0;
  for (size_t i = 0; i < x->size(); ++i) {
    const double x0 = (*x)[i];
    (*x)[i] = x0 + eps;
    const double fp = f();
    (*x)[i] = x0 - eps;
    const double fm = f();
    (*x)[i] = x0;
    const double fd = (fp - fm) / (2 * eps);
    const double err = std::abs(fd - g[i]) / std::max(1.0, std::abs(fd));
    worst = std::max(worst, err);
    EXPECT_LT(err, tol) << what << "[" << i << "]: fd " << fd << " analytic " << g[i];
  }
  ::testing::Test::RecordProperty(std::string("worst_rel_err_") + what, std::to_string(worst));
}

// Max |a - b| / max(1, |b|) over the elements.
template <typename A, typename B>
double MaxRelDiff(const std::vector<A>& a, const std::vector<B>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    m = std::max(m, std::abs(double(a[i]) - double(b[i])) / std::max(1.0, std::abs(double(b[i]))));
  }
  return m;
}

TEST(LayersEncoderTest, ForwardLooksUpAndBackwardScattersWithRepeats) {
  const int V = 5, C = 3;
  const std::vector<int32_t> tok = {2, 0, 2, 4, 2, 1};
  const int64_t N = tok.size();
  Vec wte = RandomVec(V * C, 1), out(N * C);
  EncoderForward(out.data(), tok.data(), wte.data(), N, C);
  for (int64_t r = 0; r < N; ++r) {
    for (int c = 0; c < C; ++c) EXPECT_EQ(out[r * C + c], wte[tok[r] * C + c]);
  }
  const Vec dout = RandomVec(N * C, 2);
  Vec dwte(V * C, 0.5);  // backward accumulates on top of what is there
  EncoderBackward(dwte.data(), dout.data(), tok.data(), N, C);
  auto f = [&] {
    EncoderForward(out.data(), tok.data(), wte.data(), N, C);
    return Dot(out, dout);
  };
  Vec g = dwte;
  for (double& x : g) x -= 0.5;
  ExpectGradMatches(f, &wte, g, "dwte");
  for (int c = 0; c < C; ++c) EXPECT_EQ(dwte[3 * C + c], 0.5);  // token 3 never appears
}

TEST(LayersRmsNormTest, ForwardMatchesFormula) {
  const int64_t N = 4;
  const int C = 9;
  const Vec x = RandomVec(N * C, 3, 2.0), w = RandomVec(C, 4);
  Vec y(N * C), rstd(N);
  RmsNormForward(y.data(), rstd.data(), x.data(), w.data(), N, C);
  for (int64_t r = 0; r < N; ++r) {
    double ms = 0;
    for (int c = 0; c < C; ++c) ms += x[r * C + c] * x[r * C + c] / C;
    const double rs = 1.0 / std::sqrt(ms + 1e-6);
    EXPECT_NEAR(rstd[r], rs, 1e-14 * rs);
    for (int c = 0; c < C; ++c) EXPECT_NEAR(y[r * C + c], x[r * C + c] * rs * w[c], 1e-13);
  }
}

TEST(LayersRmsNormTest, BackwardMatchesFiniteDifferences) {
  const int64_t N = 5;
  const int C = 7;
  Vec x = RandomVec(N * C, 5), w = RandomVec(C, 6);
  const Vec dout = RandomVec(N * C, 7);
  Vec y(N * C), rstd(N);
  auto f = [&] {
    RmsNormForward(y.data(), rstd.data(), x.data(), w.data(), N, C);
    return Dot(y, dout);
  };
  f();
  Vec dx(N * C, 0.0), dw(C, 0.0);
  RmsNormBackward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
  ExpectGradMatches(f, &x, dx, "dinp");
  ExpectGradMatches(f, &w, dw, "dweight");
}

TEST(LayersRmsNormTest, BackwardAccumulates) {
  const int64_t N = 3;
  const int C = 4;
  const Vec x = RandomVec(N * C, 8), w = RandomVec(C, 9), dout = RandomVec(N * C, 10);
  Vec y(N * C), rstd(N);
  RmsNormForward(y.data(), rstd.data(), x.data(), w.data(), N, C);
  Vec dx0(N * C, 0.0), dw0(C, 0.0), dx1(N * C, 1.0), dw1(C, -2.0);
  RmsNormBackward(dx0.data(), dw0.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
  RmsNormBackward(dx1.data(), dw1.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
  for (int64_t i = 0; i < N * C; ++i) EXPECT_NEAR(dx1[i], dx0[i] + 1.0, 1e-14);
  for (int c = 0; c < C; ++c) EXPECT_NEAR(dw1[c], dw0[c] - 2.0, 1e-14);
}

TEST(LayersRmsNormTest, WeightGradientIndependentOfThreadCount) {
  const int64_t N = 257;
  const int C = 37;
  const std::vector<float> x = ToFloat(RandomVec(N * C, 11)), w = ToFloat(RandomVec(C, 12)),
                           dout = ToFloat(RandomVec(N * C, 13));
  std::vector<float> y(N * C), rstd(N);
  RmsNormForward(y.data(), rstd.data(), x.data(), w.data(), N, C);
  std::vector<std::vector<float>> dws, dxs;
  const int saved = omp_get_max_threads();
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    std::vector<float> dx(N * C, 0.f), dw(C, 0.f);
    RmsNormBackward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
    dws.push_back(dw);
    dxs.push_back(dx);
  }
  omp_set_num_threads(saved);
  EXPECT_EQ(dws[0], dws[1]);
  EXPECT_EQ(dws[0], dws[2]);
  EXPECT_EQ(dxs[0], dxs[1]);
  EXPECT_EQ(dxs[0], dxs[2]);
}

TEST(LayersMatmulTest, ForwardMatchesNaive) {
  const int64_t N = 6;
  const int IC = 5, OC = 4;
  const Vec x = RandomVec(N * IC, 14), w = RandomVec(OC * IC, 15);
  Vec y(N * OC);
  MatmulForward(y.data(), x.data(), w.data(), N, IC, OC);
  for (int64_t r = 0; r < N; ++r) {
    for (int o = 0; o < OC; ++o) {
      double s = 0;
      for (int i = 0; i < IC; ++i) s += x[r * IC + i] * w[o * IC + i];
      EXPECT_NEAR(y[r * OC + o], s, 1e-13);
    }
  }
}

TEST(LayersMatmulTest, BackwardMatchesFiniteDifferences) {
  const int64_t N = 6;
  const int IC = 5, OC = 4;
  Vec x = RandomVec(N * IC, 16), w = RandomVec(OC * IC, 17);
  const Vec dout = RandomVec(N * OC, 18);
  Vec y(N * OC);
  auto f = [&] {
    MatmulForward(y.data(), x.data(), w.data(), N, IC, OC);
    return Dot(y, dout);
  };
  Vec dx(N * IC, 0.0), dw(OC * IC, 0.0);
  MatmulBackward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), N, IC, OC);
  ExpectGradMatches(f, &x, dx, "dinp");
  ExpectGradMatches(f, &w, dw, "dweight");
  // Null dinp skips the input gradient and still accumulates dweight.
  Vec dw2 = dw;
  MatmulBackward<double>(nullptr, dw2.data(), dout.data(), x.data(), w.data(), N, IC, OC);
  for (size_t i = 0; i < dw.size(); ++i) EXPECT_NEAR(dw2[i], 2 * dw[i], 1e-13);
}

TEST(LayersRopeTest, RotatesHalvesAndKeepsRelativePositions) {
  const int Tn = 7, D = 8, h = D / 2;
  Vec cs(Tn * h), sn(Tn * h);
  RopeTables(cs.data(), sn.data(), Tn, D);
  // Pair i at position t rotates by t * 10000^(-2i/D).
  EXPECT_NEAR(cs[3 * h + 1], std::cos(3 * std::pow(10000.0, -2.0 / D)), 1e-15);
  EXPECT_NEAR(sn[5 * h + 2], std::sin(5 * std::pow(10000.0, -4.0 / D)), 1e-15);
  // One sequence: a query q and key k placed at every position.
  const Vec q = RandomVec(D, 19), k = RandomVec(D, 20);
  Vec qs(Tn * D), ks(Tn * D);
  for (int t = 0; t < Tn; ++t) {
    std::copy(q.begin(), q.end(), qs.begin() + t * D);
    std::copy(k.begin(), k.end(), ks.begin() + t * D);
  }
  RopeForward(qs.data(), qs.data(), cs.data(), sn.data(), 1, Tn, D);  // in place
  RopeForward(ks.data(), ks.data(), cs.data(), sn.data(), 1, Tn, D);
  for (int d = 0; d < D; ++d) EXPECT_EQ(qs[d], q[d]);  // position 0 is the identity
  // Rotate-half pairing: (x[0], x[h]) rotate together; norms of pairs are kept.
  const double n0 = q[0] * q[0] + q[h] * q[h];
  EXPECT_NEAR(qs[2 * D] * qs[2 * D] + qs[2 * D + h] * qs[2 * D + h], n0, 1e-13);
  EXPECT_NEAR(qs[2 * D], q[0] * cs[2 * h] - q[h] * sn[2 * h], 1e-15);
  // q_m . k_n depends only on m - n.
  auto dot = [&](int m, int n) {
    double s = 0;
    for (int d = 0; d < D; ++d) s += qs[m * D + d] * ks[n * D + d];
    return s;
  };
  EXPECT_NEAR(dot(5, 2), dot(3, 0), 1e-12);
  EXPECT_NEAR(dot(6, 6), dot(1, 1), 1e-12);
  EXPECT_NEAR(dot(2, 5), dot(0, 3), 1e-12);
}

TEST(LayersRopeTest, BackwardMatchesFiniteDifferences) {
  const int B = 2, H = 3, Tn = 5, D = 6;
  const int64_t n = int64_t(B) * H * Tn * D;
  Vec cs(Tn * D / 2), sn(Tn * D / 2);
  RopeTables(cs.data(), sn.data(), Tn, D);
  Vec x = RandomVec(n, 21), y(n);
  const Vec dout = RandomVec(n, 22);
  auto f = [&] {
    RopeForward(y.data(), x.data(), cs.data(), sn.data(), B * H, Tn, D);
    return Dot(y, dout);
  };
  Vec dx(n, 0.0);
  RopeBackward(dx.data(), dout.data(), cs.data(), sn.data(), B * H, Tn, D);
  ExpectGradMatches(f, &x, dx, "dinp");
}

TEST(LayersActivationTest, GeluForwardAndBackward) {
  const int64_t n = 40;
  Vec x = RandomVec(n, 23, 2.5), y(n);
  const Vec dout = RandomVec(n, 24);
  GeluForward(y.data(), x.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    const double ref = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
    EXPECT_NEAR(y[i], ref, 1e-15 * std::max(1.0, std::abs(ref)));
  }
  auto f = [&] {
    GeluForward(y.data(), x.data(), n);
    return Dot(y, dout);
  };
  Vec dx(n, 0.0);
  GeluBackward(dx.data(), x.data(), dout.data(), n);
  ExpectGradMatches(f, &x, dx, "gelu");
}

TEST(LayersActivationTest, Relu2ForwardAndBackward) {
  const int64_t n = 40;
  Vec x = RandomVec(n, 25, 2.0), y(n);
  for (double& v : x) {
    if (std::abs(v) < 1e-3) v = 0.1;  // keep the finite differences off the kink
  }
  const Vec dout = RandomVec(n, 26);
  Relu2Forward(y.data(), x.data(), n);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(y[i], x[i] > 0 ? x[i] * x[i] : 0.0);
  auto f = [&] {
    Relu2Forward(y.data(), x.data(), n);
    return Dot(y, dout);
  };
  Vec dx(n, 0.0);
  Relu2Backward(dx.data(), x.data(), dout.data(), n);
  ExpectGradMatches(f, &x, dx, "relu2");
}

TEST(LayersResidualTest, ForwardAndBackward) {
  const int64_t n = 10;
  Vec a = RandomVec(n, 27), b = RandomVec(n, 28), y(n);
  const Vec dout = RandomVec(n, 29);
  auto f = [&] {
    ResidualForward(y.data(), a.data(), b.data(), n);
    return Dot(y, dout);
  };
  Vec da(n, 0.0), db(n, 0.0);
  ResidualBackward(da.data(), db.data(), dout.data(), n);
  ExpectGradMatches(f, &a, da, "dinp1");
  ExpectGradMatches(f, &b, db, "dinp2");
}

TEST(LayersSoftmaxCrossEntropyTest, LossAndGradient) {
  const int64_t N = 6;
  const int V = 11;
  Vec logits = RandomVec(N * V, 30, 3.0);
  logits[5] = 40;  // a large logit: the max subtraction must keep it finite
  const std::vector<int32_t> tgt = {0, 3, 10, 5, 5, 7};
  const double dloss = 0.37;
  Vec losses(N);
  SoftmaxCrossEntropy(losses.data(), static_cast<double*>(nullptr), logits.data(), tgt.data(), N, V,
                      0.0);
  for (int64_t r = 0; r < N; ++r) {
    double mx = -1e300, s = 0;
    for (int j = 0; j < V; ++j) mx = std::max(mx, logits[r * V + j]);
    for (int j = 0; j < V; ++j) s += std::exp(logits[r * V + j] - mx);
    EXPECT_NEAR(losses[r], mx + std::log(s) - logits[r * V + tgt[r]], 1e-12);
  }
  auto f = [&] {
    SoftmaxCrossEntropy(losses.data(), static_cast<double*>(nullptr), logits.data(), tgt.data(), N,
                        V, 0.0);
    double s = 0;
    for (double l : losses) s += dloss * l;
    return s;
  };
  Vec dlogits(N * V, 123.0);  // overwritten, not accumulated
  Vec losses2(N);
  SoftmaxCrossEntropy(losses2.data(), dlogits.data(), logits.data(), tgt.data(), N, V, dloss);
  EXPECT_EQ(losses, losses2);
  ExpectGradMatches(f, &logits, dlogits, "dlogits");
  // In place: the gradient replaces the logits.
  Vec inplace = logits;
  SoftmaxCrossEntropy(static_cast<double*>(nullptr), inplace.data(), inplace.data(), tgt.data(), N,
                      V, dloss);
  EXPECT_EQ(inplace, dlogits);
}

TEST(LayersPermuteTest, QkvSplitMatchesIndexingAndItsAdjoint) {
  const int B = 2, Tn = 3, H = 2, D = 4, C = H * D;
  const int64_t n = int64_t(B) * Tn * C;
  Vec qkv = RandomVec(3 * n, 31), q(n), k(n), v(n);
  QkvSplitForward(q.data(), k.data(), v.data(), qkv.data(), B, Tn, H, D);
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < Tn; ++t) {
      for (int h = 0; h < H; ++h) {
        for (int d = 0; d < D; ++d) {
          const int64_t src = (int64_t(b) * Tn + t) * 3 * C + h * D + d;
          const int64_t dst = ((int64_t(b) * H + h) * Tn + t) * D + d;
          EXPECT_EQ(q[dst], qkv[src]);
          EXPECT_EQ(k[dst], qkv[src + C]);
          EXPECT_EQ(v[dst], qkv[src + 2 * C]);
        }
      }
    }
  }
  const Vec gq = RandomVec(n, 32), gk = RandomVec(n, 33), gv = RandomVec(n, 34);
  auto f = [&] {
    QkvSplitForward(q.data(), k.data(), v.data(), qkv.data(), B, Tn, H, D);
    return Dot(q, gq) + Dot(k, gk) + Dot(v, gv);
  };
  Vec dqkv(3 * n, 0.0);
  QkvSplitBackward(dqkv.data(), gq.data(), gk.data(), gv.data(), B, Tn, H, D);
  ExpectGradMatches(f, &qkv, dqkv, "dqkv");
}

TEST(LayersPermuteTest, HeadsMergeMatchesIndexingAndItsAdjoint) {
  const int B = 2, Tn = 3, H = 3, D = 2;
  const int64_t n = int64_t(B) * Tn * H * D;
  Vec x = RandomVec(n, 35), y(n);
  HeadsMergeForward(y.data(), x.data(), B, Tn, H, D);
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < H; ++h) {
      for (int t = 0; t < Tn; ++t) {
        for (int d = 0; d < D; ++d) {
          EXPECT_EQ(y[((int64_t(b) * Tn + t) * H + h) * D + d],
                    x[((int64_t(b) * H + h) * Tn + t) * D + d]);
        }
      }
    }
  }
  const Vec dout = RandomVec(n, 36);
  auto f = [&] {
    HeadsMergeForward(y.data(), x.data(), B, Tn, H, D);
    return Dot(y, dout);
  };
  Vec dx(n, 0.0);
  HeadsMergeBackward(dx.data(), dout.data(), B, Tn, H, D);
  ExpectGradMatches(f, &x, dx, "dinp");
}

// Every forward in float against the same op in double on the same (float-representable) inputs.
TEST(LayersFloatVsDoubleTest, ForwardsAgree) {
  const int64_t N = 64;
  const int C = 48, OC = 40, V = 50;
  const std::vector<float> xf = ToFloat(RandomVec(N * C, 37, 1.5)),
                           wf = ToFloat(RandomVec(OC * C, 38, 0.2)), gf = ToFloat(RandomVec(C, 39));
  const Vec xd(xf.begin(), xf.end()), wd(wf.begin(), wf.end()), gd(gf.begin(), gf.end());
  {
    std::vector<float> y(N * C), r(N);
    Vec yd(N * C), rd(N);
    RmsNormForward(y.data(), r.data(), xf.data(), gf.data(), N, C);
    RmsNormForward(yd.data(), rd.data(), xd.data(), gd.data(), N, C);
    EXPECT_LT(MaxRelDiff(y, yd), 2e-6);
  }
  {
    std::vector<float> y(N * OC);
    Vec yd(N * OC);
    MatmulForward(y.data(), xf.data(), wf.data(), N, C, OC);
    MatmulForward(yd.data(), xd.data(), wd.data(), N, C, OC);
    EXPECT_LT(MaxRelDiff(y, yd), 2e-6);
  }
  {
    const int Tn = 16, D = 12;  // (B*H = 16) x Tn x D = N x C elements
    std::vector<float> cf(Tn * D / 2), sf(Tn * D / 2), y(N * C);
    Vec cd(Tn * D / 2), sd(Tn * D / 2), yd(N * C);
    RopeTables(cf.data(), sf.data(), Tn, D);
    RopeTables(cd.data(), sd.data(), Tn, D);
    RopeForward(y.data(), xf.data(), cf.data(), sf.data(), N * C / (Tn * D), Tn, D);
    RopeForward(yd.data(), xd.data(), cd.data(), sd.data(), N * C / (Tn * D), Tn, D);
    EXPECT_LT(MaxRelDiff(y, yd), 2e-6);
  }
  {
    std::vector<float> y(N * C);
    Vec yd(N * C);
    GeluForward(y.data(), xf.data(), N * C);
    GeluForward(yd.data(), xd.data(), N * C);
    EXPECT_LT(MaxRelDiff(y, yd), 2e-6);
    Relu2Forward(y.data(), xf.data(), N * C);
    Relu2Forward(yd.data(), xd.data(), N * C);
    EXPECT_LT(MaxRelDiff(y, yd), 2e-6);
  }
  {
    const int64_t rows = N * C / V;
    const std::vector<float> zf = ToFloat(RandomVec(rows * V, 40, 4.0));
    const Vec zd(zf.begin(), zf.end());
    std::vector<int32_t> tgt(rows);
    for (int64_t r = 0; r < rows; ++r) tgt[r] = int32_t((r * 7) % V);
    std::vector<float> l(rows), dz(rows * V);
    Vec ld(rows), dzd(rows * V);
    SoftmaxCrossEntropy(l.data(), dz.data(), zf.data(), tgt.data(), rows, V, 1.0f / rows);
    SoftmaxCrossEntropy(ld.data(), dzd.data(), zd.data(), tgt.data(), rows, V, 1.0 / rows);
    EXPECT_LT(MaxRelDiff(l, ld), 1e-5);
    EXPECT_LT(MaxRelDiff(dz, dzd), 1e-7);
  }
}

}  // namespace
}  // namespace ablate::kernels
