// Every device layer op (kernels/layers/cuda) against its CPU twin (kernels/layers/layers_cpu.h)
// computed in double on the same inputs (rounded to bf16 first where the device reads bf16).
// Tolerances: fp32 paths allclose(atol 1e-5, rtol 1e-4) or tighter; bf16 outputs within bf16
// rounding (rtol 8e-3); GEMMs rel. L2 <= 2e-3 (fp32 out) / 5e-3 (bf16 out). Permutes, casts and the
// embedding lookup are exact. Skips without a GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "gpu/gpu_test_util.h"
#include "layers/cuda/gemm_cuda.h"
#include "layers/cuda/layers_cuda.h"
#include "layers/layers_cpu.h"

namespace ablate::kernels::cuda {
namespace {

using namespace ::ablate::gputest;  // NOLINT

TEST(LayersGpu, EncoderForwardBackward) {
  SKIP_WITHOUT_GPU();
  const int V = 50, C = 70, N = 300;
  std::mt19937 rng(1);
  std::vector<int32_t> tok(N);
  for (auto& t : tok) t = int(rng() % 20) * 2;  // repeats, and tokens never used
  auto wte = Randn(size_t(V) * C, 2);
  auto dout = Randn(size_t(N) * C, 3);
  auto dwte0 = Randn(size_t(V) * C, 4);
  Dev<int32_t> dtok(tok);
  Dev<float> dwte(wte), dout_d(dout), out(size_t(N) * C), dw(dwte0);
  ASSERT_TRUE(EncoderForwardCuda(out.p, dtok.p, dwte.p, N, C, 0).ok());
  std::vector<float> ref(size_t(N) * C);
  kernels::EncoderForward(ref.data(), tok.data(), wte.data(), N, C);
  EXPECT_EQ(out.Get(), ref);

  TokenBuckets bk;
  BuildTokenBuckets(tok.data(), N, V, &bk);
  ASSERT_EQ(bk.rows.size(), size_t(N));
  Dev<int32_t> u(bk.tokens), o(bk.offsets), r(bk.rows);
  ASSERT_TRUE(EncoderBackwardCuda(dw.p, dout_d.p, u.p, o.p, r.p, int(bk.tokens.size()), C, 0).ok());
  std::vector<double> refd = ToDouble(dwte0), doutd = ToDouble(dout);
  kernels::EncoderBackward(refd.data(), doutd.data(), tok.data(), N, C);
  EXPECT_LE(MaxScaledErr(dw.Get(), refd, 1e-5, 1e-5), 1.0);
}

// The planned (chunked) embedding backward: skewed tokens (one token owns most rows, as the space
// byte does in a byte corpus, a few own several chunks, many own one row), against the CPU twin,
// bit-identical on a second run. C = 768 takes the float4 path, C = 70 the scalar one.
void EncoderPlannedCase(int C) {
  const int V = 300, N = 2500;
  std::mt19937 rng(7);
  std::vector<int32_t> tok(N);
  for (auto& t : tok) {
    const unsigned r = rng() % 100;
    t = r < 60 ? 5 : r < 80 ? 7 + int(rng() % 3) * 2 : int(rng() % V);
  }
  auto dout = Randn(size_t(N) * C, 30);
  auto dwte0 = Randn(size_t(V) * C, 31);
  EncoderBackwardPlan plan;
  BuildEncoderBackwardPlan(tok.data(), N, V, &plan);
  ASSERT_LE(plan.data.size(), EncoderBackwardPlanInts(N));
  ASSERT_GT(plan.n_multi, 1);
  ASSERT_GT(plan.n_chunks, plan.n_multi);
  ASSERT_LE(size_t(plan.n_slots) * C, EncoderBackwardScratch(N, C));
  Dev<int32_t> dplan(plan.data);
  Dev<float> dout_d(dout), dw(dwte0), dw2(dwte0), scratch(EncoderBackwardScratch(N, C));
  // Too little scratch is an error that names the need.
  Status small = EncoderBackwardPlannedCuda(dw.p, dout_d.p, plan, dplan.p, C, scratch.p,
                                            size_t(plan.n_slots) * C - 1, 0);
  EXPECT_FALSE(small.ok());
  ASSERT_TRUE(EncoderBackwardPlannedCuda(dw.p, dout_d.p, plan, dplan.p, C, scratch.p,
                                         EncoderBackwardScratch(N, C), 0)
                  .ok());
  ASSERT_TRUE(EncoderBackwardPlannedCuda(dw2.p, dout_d.p, plan, dplan.p, C, scratch.p,
                                         EncoderBackwardScratch(N, C), 0)
                  .ok());
  std::vector<double> refd = ToDouble(dwte0), doutd = ToDouble(dout);
  kernels::EncoderBackward(refd.data(), doutd.data(), tok.data(), N, C);
  const auto got = dw.Get();
  EXPECT_LE(MaxScaledErr(got, refd, 1e-5, 1e-5), 1.0) << "C = " << C;
  EXPECT_EQ(got, dw2.Get()) << "C = " << C;  // deterministic
}

TEST(LayersGpu, EncoderBackwardPlanned) {
  SKIP_WITHOUT_GPU();
  EncoderPlannedCase(768);
  EncoderPlannedCase(70);
}

// More tokens with several chunks than a grid's y dimension holds (65535): a large vocabulary,
// each token on kEncoderChunkRows + 1 rows.
TEST(LayersGpu, EncoderBackwardPlannedManyMultiChunkTokens) {
  SKIP_WITHOUT_GPU();
  const int V = 65600, C = 4;
  const int64_t N = int64_t(V) * (kEncoderChunkRows + 1);
  std::vector<int32_t> tok(N);
  for (int64_t i = 0; i < N; ++i) tok[i] = int32_t((i * 7919) % V);
  EncoderBackwardPlan plan;
  BuildEncoderBackwardPlan(tok.data(), N, V, &plan);
  ASSERT_EQ(plan.n_multi, V);
  auto dout = Randn(size_t(N) * C, 32);
  auto dwte0 = Randn(size_t(V) * C, 33);
  Dev<int32_t> dplan(plan.data);
  Dev<float> dout_d(dout), dw(dwte0), scratch(EncoderBackwardScratch(N, C));
  const Status st = EncoderBackwardPlannedCuda(dw.p, dout_d.p, plan, dplan.p, C, scratch.p,
                                               EncoderBackwardScratch(N, C), 0);
  ASSERT_TRUE(st.ok()) << st.ToString();
  std::vector<double> refd = ToDouble(dwte0), doutd = ToDouble(dout);
  kernels::EncoderBackward(refd.data(), doutd.data(), tok.data(), N, C);
  EXPECT_LE(MaxScaledErr(dw.Get(), refd, 1e-5, 1e-5), 1.0);
}

template <typename Tout>
void RmsNormCase(int64_t N, int C) {
  auto x = Randn(size_t(N) * C, 10, 2.0f);
  auto w = Randn(size_t(C), 11);
  for (float& v : w) v = 1.0f + 0.3f * v;
  Dev<float> dx(x), dw(w), rstd(N);
  Dev<Tout> out(size_t(N) * C);
  ASSERT_TRUE((RmsNormForwardCuda<float, Tout>(out.p, rstd.p, dx.p, dw.p, N, C, 0).ok()));
  std::vector<double> xd = ToDouble(x), wd = ToDouble(w), ref(xd.size()), rref(N);
  kernels::RmsNormForward(ref.data(), rref.data(), xd.data(), wd.data(), N, C);
  std::vector<float> got;
  if constexpr (std::is_same_v<Tout, float>) {
    got = out.Get();
    EXPECT_LE(MaxScaledErr(got, ref, 1e-6, 1e-5), 1.0);
  } else {
    got = FromBf16(out.Get());
    EXPECT_LE(MaxScaledErr(got, ref, 1e-6, 8e-3), 1.0);
  }
  EXPECT_LE(MaxScaledErr(rstd.Get(), rref, 1e-7, 1e-5), 1.0);

  // Backward, accumulating into a non-zero dinp and dweight.
  auto dy = Randn(size_t(N) * C, 12);
  auto dx0 = Randn(size_t(N) * C, 13);
  auto dw0 = Randn(size_t(C), 14);
  Dev<float> ddy(dy), ddx(dx0), ddw(dw0), scratch(RmsNormBackwardScratch(N, C));
  ASSERT_TRUE((RmsNormBackwardCuda<float, float>(ddx.p, true, ddw.p, ddy.p, dx.p, dw.p, rstd.p, N,
                                                 C, scratch.p, scratch.n, 0).ok()));
  std::vector<double> dyd = ToDouble(dy), dxr = ToDouble(dx0), dwr = ToDouble(dw0);
  kernels::RmsNormBackward(dxr.data(), dwr.data(), dyd.data(), xd.data(), wd.data(), rref.data(), N,
                           C);
  EXPECT_LE(MaxScaledErr(ddx.Get(), dxr, 1e-5, 1e-4), 1.0);
  EXPECT_LE(RelL2(ddw.Get(), dwr), 1e-5);
}

TEST(LayersGpu, RmsNorm) {
  SKIP_WITHOUT_GPU();
  RmsNormCase<float>(37, 96);
  RmsNormCase<__nv_bfloat16>(37, 96);
  RmsNormCase<float>(3000, 64);  // the QK-norm shape: many rows of D with one (D) gain
}

TEST(LayersGpu, RopeForwardBackward) {
  SKIP_WITHOUT_GPU();
  const int BH = 6, Tn = 40, D = 64, h = D / 2;
  std::vector<float> cs(size_t(Tn) * h), sn(cs.size());
  kernels::RopeTables(cs.data(), sn.data(), Tn, D);
  std::vector<double> csd(cs.begin(), cs.end()), snd(sn.begin(), sn.end());
  auto x = Randn(size_t(BH) * Tn * D, 20);
  Dev<float> dx(x), dc(cs), ds(sn), out(x.size());
  ASSERT_TRUE((RopeForwardCuda<float, float>(out.p, dx.p, dc.p, ds.p, BH, Tn, D, 0).ok()));
  std::vector<double> xd = ToDouble(x), ref(xd.size());
  kernels::RopeForward(ref.data(), xd.data(), csd.data(), snd.data(), BH, Tn, D);
  EXPECT_LE(MaxScaledErr(out.Get(), ref, 1e-6, 1e-5), 1.0);
  // In place, bf16 out.
  Dev<__nv_bfloat16> outb(x.size());
  ASSERT_TRUE((RopeForwardCuda<float, __nv_bfloat16>(outb.p, dx.p, dc.p, ds.p, BH, Tn, D, 0).ok()));
  EXPECT_LE(MaxScaledErr(FromBf16(outb.Get()), ref, 1e-6, 8e-3), 1.0);

  auto g0 = Randn(x.size(), 21);
  Dev<float> dg(g0);
  ASSERT_TRUE(RopeBackwardCuda<float>(dg.p, true, dx.p, dc.p, ds.p, BH, Tn, D, 0).ok());
  std::vector<double> gref = ToDouble(g0);
  kernels::RopeBackward(gref.data(), xd.data(), csd.data(), snd.data(), BH, Tn, D);
  EXPECT_LE(MaxScaledErr(dg.Get(), gref, 1e-6, 1e-5), 1.0);
}

TEST(LayersGpu, Activations) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 10007;
  auto x = Randn(n, 30, 3.0f);
  auto dy = Randn(n, 31);
  auto d0 = Randn(n, 32);
  std::vector<double> xd = ToDouble(x), dyd = ToDouble(dy);
  Dev<float> dx(x), ddy(dy), out(n);
  for (int act = 0; act < 2; ++act) {
    std::vector<double> ref(n), gref = ToDouble(d0);
    Dev<float> dg(d0);
    if (act == 0) {
      ASSERT_TRUE((GeluForwardCuda<float, float>(out.p, dx.p, n, 0).ok()));
      ASSERT_TRUE(GeluBackwardCuda<float>(dg.p, true, dx.p, ddy.p, n, 0).ok());
      kernels::GeluForward(ref.data(), xd.data(), n);
      kernels::GeluBackward(gref.data(), xd.data(), dyd.data(), n);
    } else {
      ASSERT_TRUE((Relu2ForwardCuda<float, float>(out.p, dx.p, n, 0).ok()));
      ASSERT_TRUE(Relu2BackwardCuda<float>(dg.p, true, dx.p, ddy.p, n, 0).ok());
      kernels::Relu2Forward(ref.data(), xd.data(), n);
      kernels::Relu2Backward(gref.data(), xd.data(), dyd.data(), n);
    }
    EXPECT_LE(MaxScaledErr(out.Get(), ref, 1e-6, 1e-5), 1.0) << "act " << act;
    EXPECT_LE(MaxScaledErr(dg.Get(), gref, 1e-5, 1e-5), 1.0) << "act " << act;
  }
}

TEST(LayersGpu, ResidualCastPermutes) {
  SKIP_WITHOUT_GPU();
  const int B = 2, Tn = 5, H = 3, D = 64, C = H * D;
  const int64_t n = int64_t(B) * Tn * C;
  auto a = Randn(n, 40), b = Randn(n, 41);
  Dev<float> da(a), db(b), out(n);
  ASSERT_TRUE(ResidualForwardCuda(out.p, da.p, db.p, n, 0).ok());
  auto got = out.Get();
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], a[i] + b[i]);
  ASSERT_TRUE(ResidualBackwardCuda(da.p, db.p, out.p, n, 0).ok());
  auto ga = da.Get();
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(ga[i], a[i] + got[i]);

  Dev<__nv_bfloat16> cb(n);
  const std::vector<float> b2 = db.Get();  // b + got after the backward above
  ASSERT_TRUE((CastCuda<float, __nv_bfloat16>(cb.p, db.p, n, 0).ok()));
  auto bb = FromBf16(cb.Get());
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(bb[i], RoundToBf16(b2[i]));

  // QKV split and heads merge, forward and backward, against the CPU permutes (exact).
  auto qkv = Randn(3 * n, 42);
  Dev<float> dqkv(qkv), q(n), k(n), dqkv2(3 * n);
  Dev<__nv_bfloat16> v(n);
  ASSERT_TRUE((QkvSplitForwardCuda<float, float, __nv_bfloat16>(q.p, k.p, v.p, dqkv.p, B, Tn, H, D, 0).ok()));
  std::vector<float> qr(n), kr(n), vr(n);
  kernels::QkvSplitForward(qr.data(), kr.data(), vr.data(), qkv.data(), B, Tn, H, D);
  EXPECT_EQ(q.Get(), qr);
  EXPECT_EQ(k.Get(), kr);
  EXPECT_EQ(FromBf16(v.Get()), RoundBf16(vr));
  Dev<float> vf(vr);
  ASSERT_TRUE((QkvSplitBackwardCuda<float, float, float>(dqkv2.p, q.p, k.p, vf.p, B, Tn, H, D, 0).ok()));
  std::vector<float> back(3 * n, 0.f);
  kernels::QkvSplitBackward(back.data(), qr.data(), kr.data(), vr.data(), B, Tn, H, D);
  EXPECT_EQ(dqkv2.Get(), back);
  EXPECT_EQ(dqkv2.Get(), qkv);

  Dev<float> merged(n), unmerged(n);
  ASSERT_TRUE(HeadsMergeForwardCuda<float>(merged.p, q.p, B, Tn, H, D, 0).ok());
  std::vector<float> mr(n);
  kernels::HeadsMergeForward(mr.data(), qr.data(), B, Tn, H, D);
  EXPECT_EQ(merged.Get(), mr);
  ASSERT_TRUE(HeadsMergeBackwardCuda<float>(unmerged.p, merged.p, B, Tn, H, D, 0).ok());
  EXPECT_EQ(unmerged.Get(), qr);
}

template <typename T>
void ClassifierCase(int64_t N, int V, double rtol) {
  auto z = Randn(size_t(N) * V, 50, 3.0f);
  if constexpr (!std::is_same_v<T, float>) z = RoundBf16(z);
  std::mt19937 rng(51);
  std::vector<int32_t> tg(N);
  for (auto& t : tg) t = int(rng() % V);
  std::vector<T> zt(z.size());
  for (size_t i = 0; i < z.size(); ++i) zt[i] = T(z[i]);
  Dev<T> dz(zt);
  Dev<int32_t> dt(tg);
  Dev<float> losses(N);
  const float dloss = 1.0f / float(N);
  ASSERT_TRUE(SoftmaxCrossEntropyCuda<T>(losses.p, dz.p, dz.p, dt.p, N, V, dloss, 0).ok());
  std::vector<double> zd = ToDouble(z), lref(N), gref(zd.size());
  kernels::SoftmaxCrossEntropy(lref.data(), gref.data(), zd.data(), tg.data(), N, V, double(dloss));
  EXPECT_LE(MaxScaledErr(losses.Get(), lref, 1e-5, 1e-5), 1.0);
  std::vector<float> g;
  if constexpr (std::is_same_v<T, float>) {
    g = dz.Get();
  } else {
    g = FromBf16(dz.Get());
  }
  EXPECT_LE(MaxScaledErr(g, gref, 1e-9, rtol), 1.0);
  // Loss only (null dlogits), and the device mean.
  Dev<double> acc(std::vector<double>{0.5});
  ASSERT_TRUE(SoftmaxCrossEntropyCuda<T>(losses.p, nullptr, dz.p, dt.p, N, V, dloss, 0).ok());
  ASSERT_TRUE(AccumulateMeanCuda(acc.p, losses.p, N, 0).ok());
  auto lg = losses.Get();
  const double mean = std::accumulate(lg.begin(), lg.end(), 0.0) / double(N);
  EXPECT_NEAR(acc.Get()[0], 0.5 + mean, 1e-6 * (1 + std::fabs(mean)));
}

TEST(LayersGpu, FusedClassifier) {
  SKIP_WITHOUT_GPU();
  ClassifierCase<float>(33, 1000, 1e-4);
  ClassifierCase<__nv_bfloat16>(4, 50304,
                                8e-3);           // the GPT-2 vocabulary, bf16 logits (16-byte path)
  ClassifierCase<__nv_bfloat16>(5, 1001, 8e-3);  // V % 8 != 0: the per-element path
}

// The bf16 heads merge (16-byte path when D % 8 == 0, per element otherwise) is an exact permute.
TEST(LayersGpu, HeadsMergeBf16) {
  SKIP_WITHOUT_GPU();
  for (int D : {64, 128, 20}) {
    const int B = 2, Tn = 19, H = 3;
    const size_t n = size_t(B) * Tn * H * D;
    auto x = RoundBf16(Randn(n, 130 + D));
    Dev<__nv_bfloat16> in(ToBf16(x)), merged(n), back(n);
    ASSERT_TRUE(HeadsMergeForwardCuda<__nv_bfloat16>(merged.p, in.p, B, Tn, H, D, 0).ok());
    std::vector<float> mr(n);
    kernels::HeadsMergeForward(mr.data(), x.data(), B, Tn, H, D);
    EXPECT_EQ(FromBf16(merged.Get()), mr) << "D " << D;
    ASSERT_TRUE(HeadsMergeBackwardCuda<__nv_bfloat16>(back.p, merged.p, B, Tn, H, D, 0).ok());
    EXPECT_EQ(FromBf16(back.Get()), x) << "D " << D;
  }
}

TEST(LayersGpu, GradNormAndClip) {
  SKIP_WITHOUT_GPU();
  const size_t n = 1000003;
  auto g = Randn(n, 60, 0.01f);
  double ss = 0;
  for (float v : g) ss += double(v) * v;
  Dev<float> dg(g), scratch(SumSquaresScratch(n));
  Dev<double> out(1);
  ASSERT_TRUE(SumSquaresCuda(out.p, dg.p, n, scratch.p, scratch.n, 0).ok());
  const double got = out.Get()[0];
  EXPECT_NEAR(got, ss, 1e-6 * ss);
  // Deterministic: the same bits again.
  ASSERT_TRUE(SumSquaresCuda(out.p, dg.p, n, scratch.p, scratch.n, 0).ok());
  EXPECT_EQ(out.Get()[0], got);
  const double norm = std::sqrt(got);
  ASSERT_TRUE(ClipByNormCuda(dg.p, n, out.p, 2 * norm, 0).ok());  // no-op
  EXPECT_EQ(dg.Get(), g);
  ASSERT_TRUE(ClipByNormCuda(dg.p, n, out.p, 0.5 * norm, 0).ok());
  const float s = float(0.5 * norm / norm);
  auto clipped = dg.Get();
  for (size_t i = 0; i < n; i += 997) ASSERT_EQ(clipped[i], g[i] * s);
}

// out = x W^T (+ c), dX = dY W, dW += dY^T X on bf16 operands against double on the same values.
TEST(LayersGpu, LtGemm) {
  SKIP_WITHOUT_GPU();
  auto gemm_or = LtGemm::Create();
  ASSERT_TRUE(gemm_or.ok()) << gemm_or.status().ToString();
  LtGemm& gemm = **gemm_or;
  const int N = 300, IC = 128, OC = 384;
  auto x = RoundBf16(Randn(size_t(N) * IC, 70));
  // W sits 8 elements into its buffer (16-byte alignment, like tensors inside the flat buffer).
  auto wbuf = RoundBf16(Randn(size_t(OC) * IC + 8, 71, 0.1f));
  std::vector<float> w(wbuf.begin() + 8, wbuf.end());
  auto c = Randn(size_t(N) * OC, 72);
  auto dy = RoundBf16(Randn(size_t(N) * OC, 73));
  auto dw0 = Randn(size_t(OC) * IC, 74);
  Dev<__nv_bfloat16> dx(ToBf16(x)), dwb(ToBf16(wbuf)), ddy(ToBf16(dy)), outb(size_t(N) * OC);
  Dev<float> out(size_t(N) * OC), dc(c), dinp(size_t(N) * IC), dW(dw0);
  const __nv_bfloat16* W = dwb.p + 8;
  std::vector<double> xd = ToDouble(x), wd = ToDouble(w), dyd = ToDouble(dy);

  ASSERT_TRUE(gemm.Forward(out.p, OutType::kF32, dx.p, W, N, IC, OC, 1.f, 1.f, dc.p, 0).ok());
  std::vector<double> ref(size_t(N) * OC);
  kernels::MatmulForward(ref.data(), xd.data(), wd.data(), N, IC, OC);
  std::vector<double> ref_c(ref);
  for (size_t i = 0; i < ref_c.size(); ++i) ref_c[i] += c[i];
  EXPECT_LE(RelL2(out.Get(), ref_c), 2e-3);
  ASSERT_TRUE(gemm.Forward(outb.p, OutType::kBF16, dx.p, W, N, IC, OC, 1.f, 0.f, nullptr, 0).ok());
  EXPECT_LE(RelL2(FromBf16(outb.Get()), ref), 5e-3);
  // Twice through the cached plan.
  ASSERT_TRUE(gemm.Forward(out.p, OutType::kF32, dx.p, W, N, IC, OC, 1.f, 0.f, nullptr, 0).ok());
  EXPECT_LE(RelL2(out.Get(), ref), 2e-3);

  ASSERT_TRUE(gemm.BackwardData(dinp.p, OutType::kF32, ddy.p, W, N, IC, OC, 0.5f, 0.f, 0).ok());
  std::vector<double> dref(size_t(N) * IC, 0.0), dwref = ToDouble(dw0);
  kernels::MatmulBackward(dref.data(), dwref.data(), dyd.data(), xd.data(), wd.data(), N, IC, OC);
  std::vector<double> dref_half(dref);
  for (double& v : dref_half) v *= 0.5;
  EXPECT_LE(RelL2(dinp.Get(), dref_half), 2e-3);
  ASSERT_TRUE(gemm.BackwardWeight(dW.p, ddy.p, dx.p, N, IC, OC, 1.f, 1.f, 0).ok());
  EXPECT_LE(RelL2(dW.Get(), dwref), 2e-3);
}

// The fused residual-stream RMSNorm backward (dinp, its bf16 copy and dweight in one pass) against
// the CPU twin, for each per-lane register width (C <= 256, 512, 1024) and C not a multiple of 32.
void RmsNormBackwardFusedCase(int64_t N, int C, bool accumulate) {
  auto x = Randn(size_t(N) * C, 100 + C, 2.0f);
  auto w = Randn(size_t(C), 101);
  for (float& v : w) v = 1.0f + 0.3f * v;
  Dev<float> dx(x), dw(w), rstd(N), out(size_t(N) * C);
  ASSERT_TRUE((RmsNormForwardCuda<float, float>(out.p, rstd.p, dx.p, dw.p, N, C, 0).ok()));
  std::vector<double> xd = ToDouble(x), wd = ToDouble(w), ref(xd.size()), rref(N);
  kernels::RmsNormForward(ref.data(), rref.data(), xd.data(), wd.data(), N, C);
  auto dy = Randn(size_t(N) * C, 102);
  auto dx0 = Randn(size_t(N) * C, 103);
  auto dw0 = Randn(size_t(C), 104);
  Dev<float> ddy(dy), ddx(dx0), ddw(dw0), scratch(RmsNormBackwardFusedScratch(N, C));
  Dev<__nv_bfloat16> dxb(size_t(N) * C);
  ASSERT_TRUE(RmsNormBackwardFusedCuda(ddx.p, dxb.p, accumulate, ddw.p, ddy.p, dx.p, dw.p, rstd.p,
                                       N, C, scratch.p, scratch.n, 0)
                  .ok());
  std::vector<double> dyd = ToDouble(dy), dwr = ToDouble(dw0);
  std::vector<double> dxr = accumulate ? ToDouble(dx0) : std::vector<double>(dx0.size(), 0.0);
  kernels::RmsNormBackward(dxr.data(), dwr.data(), dyd.data(), xd.data(), wd.data(), rref.data(), N,
                           C);
  const std::vector<float> got = ddx.Get();
  EXPECT_LE(MaxScaledErr(got, dxr, 1e-5, 1e-4), 1.0) << "C " << C;
  EXPECT_LE(RelL2(ddw.Get(), dwr), 1e-5) << "C " << C;
  // The bf16 copy is exactly the rounded fp32 result.
  EXPECT_EQ(FromBf16(dxb.Get()), RoundBf16(got)) << "C " << C;
  // Deterministic: the same inputs give bit-identical dweight.
  Dev<float> ddx2(dx0), ddw2(dw0);
  ASSERT_TRUE(RmsNormBackwardFusedCuda(ddx2.p, nullptr, accumulate, ddw2.p, ddy.p, dx.p, dw.p,
                                       rstd.p, N, C, scratch.p, scratch.n, 0)
                  .ok());
  EXPECT_EQ(ddw2.Get(), ddw.Get());
  EXPECT_EQ(ddx2.Get(), got);
}

TEST(LayersGpu, RmsNormBackwardFused) {
  SKIP_WITHOUT_GPU();
  RmsNormBackwardFusedCase(777, 768, true);
  RmsNormBackwardFusedCase(300, 200, false);
  RmsNormBackwardFusedCase(45, 300, true);
  RmsNormBackwardFusedCase(5000, 1024, false);
  Dev<float> big(8);
  EXPECT_FALSE(RmsNormBackwardFusedCuda(big.p, nullptr, false, big.p, big.p, big.p, big.p, big.p, 1,
                                        1040, big.p, 1 << 20, 0)
                   .ok());
}

std::vector<uint16_t> Bits(const std::vector<__nv_bfloat16>& v) {
  std::vector<uint16_t> b(v.size());
  if (!v.empty()) std::memcpy(b.data(), v.data(), 2 * v.size());
  return b;
}

// QKV split + QK-norm + RoPE fused, forward and backward, against the CPU chain QkvSplit ->
// RmsNorm (per head) -> Rope (-> AddHeadOffset on k with key_offset), in double on the same bf16
// inputs.
void QkvNormRopeCase(int B, int Tn, int H, int D, bool qk_norm, bool key_offset = false) {
  const int64_t C = int64_t(H) * D, N = int64_t(B) * Tn, NH = N * H, BH = int64_t(B) * H;
  const int h = D / 2;
  std::vector<float> cs(size_t(Tn) * h), sn(cs.size());
  kernels::RopeTables(cs.data(), sn.data(), Tn, D);
  std::vector<double> csd(cs.begin(), cs.end()), snd(sn.begin(), sn.end());
  auto qkv = RoundBf16(Randn(size_t(N) * 3 * C, 110 + D, 1.5f));
  auto qg = Randn(size_t(D), 111), kg = Randn(size_t(D), 112);
  for (float& v : qg) v = 1.0f + 0.3f * v;
  for (float& v : kg) v = 1.0f + 0.3f * v;
  Dev<__nv_bfloat16> dqkv_in(ToBf16(qkv)), q(size_t(N) * C), k(size_t(N) * C), v(size_t(N) * C);
  Dev<float> dqg(qg), dkg(kg), qr(NH), kr(NH), dc(cs), ds(sn);
  const float* qgp = qk_norm ? dqg.p : nullptr;
  const float* kgp = qk_norm ? dkg.p : nullptr;
  const std::vector<float> off = Randn(size_t(H) * D, 118, 4.0f);  // a large per-head key offset
  Dev<float> doff(off);
  const float* offp = key_offset ? doff.p : nullptr;
  ASSERT_TRUE(QkvNormRopeForwardCuda(q.p, k.p, v.p, qr.p, kr.p, dqkv_in.p, qgp, kgp, dc.p, ds.p, B,
                                     Tn, H, D, 0, nullptr, 0, offp)
                  .ok());
  // CPU chain in double.
  std::vector<double> qkvd = ToDouble(qkv), qd(N * C), kd(N * C), vd(N * C), qn(N * C), kn(N * C),
                      qrr(NH), krr(NH), qo(N * C), ko(N * C);
  std::vector<double> qgd = ToDouble(qg), kgd = ToDouble(kg);
  kernels::QkvSplitForward(qd.data(), kd.data(), vd.data(), qkvd.data(), B, Tn, H, D);
  if (qk_norm) {
    kernels::RmsNormForward(qn.data(), qrr.data(), qd.data(), qgd.data(), NH, D);
    kernels::RmsNormForward(kn.data(), krr.data(), kd.data(), kgd.data(), NH, D);
  } else {
    qn = qd;
    kn = kd;
  }
  kernels::RopeForward(qo.data(), qn.data(), csd.data(), snd.data(), BH, Tn, D);
  kernels::RopeForward(ko.data(), kn.data(), csd.data(), snd.data(), BH, Tn, D);
  if (key_offset) {
    const std::vector<double> offd = ToDouble(off);
    kernels::AddHeadOffset(ko.data(), offd.data(), BH, H, Tn, D);
  }
  EXPECT_LE(MaxScaledErr(FromBf16(q.Get()), qo, 1e-5, 8e-3), 1.0) << "D " << D;
  EXPECT_LE(MaxScaledErr(FromBf16(k.Get()), ko, 1e-5, 8e-3), 1.0) << "D " << D;
  EXPECT_EQ(FromBf16(v.Get()), std::vector<float>(vd.begin(), vd.end())) << "D " << D;
  if (qk_norm) {
    EXPECT_LE(MaxScaledErr(qr.Get(), qrr, 1e-7, 1e-5), 1.0);
    EXPECT_LE(MaxScaledErr(kr.Get(), krr, 1e-7, 1e-5), 1.0);
  }
  if (D == 64 || D == 128) {
    // With the K sums (SageBwd's K-mean parts): the same bits out, and per (head, part, column)
    // the double sum of k as stored.
    const std::vector<__nv_bfloat16> q0 = q.Get(), k0 = k.Get(), v0 = v.Get();
    const std::vector<float> qr0 = qr.Get(), kr0 = kr.Get();
    std::vector<double> kf(k0.size());
    for (size_t i = 0; i < k0.size(); ++i) kf[i] = __bfloat162float(k0[i]);
    for (int R : {1, 7, 64, Tn}) {
      const int P = (Tn + R - 1) / R;
      Dev<double> sums(size_t(BH) * P * D);
      Dev<__nv_bfloat16> q2(size_t(N) * C), k2(size_t(N) * C), v2(size_t(N) * C);
      Dev<float> qr2(NH), kr2(NH);
      ASSERT_TRUE(QkvNormRopeForwardCuda(q2.p, k2.p, v2.p, qr2.p, kr2.p, dqkv_in.p, qgp, kgp, dc.p,
                                         ds.p, B, Tn, H, D, 0, sums.p, R, offp)
                      .ok());
      EXPECT_EQ(Bits(q2.Get()), Bits(q0)) << "D " << D << " R " << R;
      EXPECT_EQ(Bits(k2.Get()), Bits(k0)) << "D " << D << " R " << R;
      EXPECT_EQ(Bits(v2.Get()), Bits(v0)) << "D " << D << " R " << R;
      if (qk_norm) {
        EXPECT_EQ(qr2.Get(), qr0) << "D " << D << " R " << R;
        EXPECT_EQ(kr2.Get(), kr0) << "D " << D << " R " << R;
      }
      const std::vector<double> got_sums = sums.Get();
      int64_t wrong = 0;
      for (int64_t bh = 0; bh < BH; ++bh) {
        for (int p = 0; p < P; ++p) {
          for (int c = 0; c < D; ++c) {
            double want = 0.0, mag = 0.0;
            for (int t = p * R; t < std::min(Tn, (p + 1) * R); ++t) {
              want += kf[(bh * Tn + t) * D + c];
              mag += std::fabs(kf[(bh * Tn + t) * D + c]);
            }
            const double got = got_sums[(bh * P + p) * D + c];
            if (std::fabs(got - want) > 1e-13 * mag && wrong++ < 3) {
              ADD_FAILURE() << "D " << D << " R " << R << " head " << bh << " part " << p
                            << " column " << c << ": " << got << " vs " << want;
            }
          }
        }
      }
      EXPECT_EQ(wrong, 0) << "D " << D << " R " << R;
    }
  }

  // Backward from bf16 dq, dk, dv; gain gradients accumulate into non-zero values.
  auto gq = RoundBf16(Randn(size_t(N) * C, 113)), gk = RoundBf16(Randn(size_t(N) * C, 114)),
       gv = RoundBf16(Randn(size_t(N) * C, 115));
  auto gq0 = Randn(size_t(D), 116), gk0 = Randn(size_t(D), 117);
  Dev<__nv_bfloat16> dgq(ToBf16(gq)), dgk(ToBf16(gk)), dgv(ToBf16(gv)), dqkv(size_t(N) * 3 * C);
  Dev<float> dqgain(gq0), dkgain(gk0), scratch(QkvNormRopeBackwardScratch(B, Tn, H, D));
  ASSERT_TRUE(QkvNormRopeBackwardCuda(dqkv.p, qk_norm ? dqgain.p : nullptr,
                                      qk_norm ? dkgain.p : nullptr, dgq.p, dgk.p, dgv.p, dqkv_in.p,
                                      qgp, kgp, qr.p, kr.p, dc.p, ds.p, B, Tn, H, D, scratch.p,
                                      scratch.n, 0)
                  .ok());
  std::vector<double> gqd = ToDouble(gq), gkd = ToDouble(gk), gvd = ToDouble(gv);
  std::vector<double> dqn(N * C, 0.0), dkn(N * C, 0.0), dqr(N * C, 0.0), dkr(N * C, 0.0);
  std::vector<double> dqgr = ToDouble(gq0), dkgr = ToDouble(gk0), dqkvr(N * 3 * C, 0.0);
  kernels::RopeBackward(dqn.data(), gqd.data(), csd.data(), snd.data(), BH, Tn, D);
  kernels::RopeBackward(dkn.data(), gkd.data(), csd.data(), snd.data(), BH, Tn, D);
  if (qk_norm) {
    // The device reads the rstd it computed (fp32); the reference uses its own (double).
    kernels::RmsNormBackward(dqr.data(), dqgr.data(), dqn.data(), qd.data(), qgd.data(), qrr.data(),
                             NH, D);
    kernels::RmsNormBackward(dkr.data(), dkgr.data(), dkn.data(), kd.data(), kgd.data(), krr.data(),
                             NH, D);
  } else {
    dqr = dqn;
    dkr = dkn;
  }
  kernels::QkvSplitBackward(dqkvr.data(), dqr.data(), dkr.data(), gvd.data(), B, Tn, H, D);
  const std::vector<float> got = FromBf16(dqkv.Get());
  EXPECT_LE(RelL2(got, dqkvr), 4e-3) << "D " << D;
  EXPECT_LE(MaxScaledErr(got, dqkvr, 2e-3, 8e-3), 1.0) << "D " << D;
  if (qk_norm) {
    EXPECT_LE(RelL2(dqgain.Get(), dqgr), 1e-4) << "D " << D;
    EXPECT_LE(RelL2(dkgain.Get(), dkgr), 1e-4) << "D " << D;
    // Deterministic.
    Dev<float> dqgain2(gq0), dkgain2(gk0);
    Dev<__nv_bfloat16> dqkv2(size_t(N) * 3 * C);
    ASSERT_TRUE(QkvNormRopeBackwardCuda(dqkv2.p, dqgain2.p, dkgain2.p, dgq.p, dgk.p, dgv.p,
                                        dqkv_in.p, qgp, kgp, qr.p, kr.p, dc.p, ds.p, B, Tn, H, D,
                                        scratch.p, scratch.n, 0)
                    .ok());
    EXPECT_EQ(dqgain2.Get(), dqgain.Get());
    EXPECT_EQ(dkgain2.Get(), dkgain.Get());
  }
}

TEST(LayersGpu, QkvNormRopeFused) {
  SKIP_WITHOUT_GPU();
  QkvNormRopeCase(2, 37, 3, 64, true);
  QkvNormRopeCase(3, 50, 2, 128, true);
  QkvNormRopeCase(1, 20, 2, 96, true);
  QkvNormRopeCase(2, 33, 3, 64, false);
  // With attention.k_offset's vectors: the vectorized kernel (and its K sums) and the scalar one.
  QkvNormRopeCase(2, 37, 3, 64, true, /*key_offset=*/true);
  QkvNormRopeCase(1, 20, 2, 96, true, /*key_offset=*/true);
  // More rows than one pass of the vectorized forward's grid (4096 blocks x 32 rows): its
  // grid-stride loop; the backward's 512 blocks stride over these rows too.
  QkvNormRopeCase(11, 1024, 12, 64, true);
  Dev<__nv_bfloat16> x(64);
  Dev<float> f(64);
  EXPECT_FALSE(
      QkvNormRopeForwardCuda(x.p, x.p, x.p, f.p, f.p, x.p, f.p, nullptr, f.p, f.p, 1, 1, 1, 64, 0)
          .ok());
  EXPECT_FALSE(QkvNormRopeForwardCuda(x.p, x.p, x.p, f.p, f.p, x.p, nullptr, nullptr, f.p, f.p, 1,
                                      1, 1, 63, 0)
                   .ok());
  Dev<double> sums(64);
  EXPECT_FALSE(QkvNormRopeForwardCuda(x.p, x.p, x.p, f.p, f.p, x.p, nullptr, nullptr, f.p, f.p, 1,
                                      1, 1, 64, 0, sums.p, 0)
                   .ok());
  EXPECT_FALSE(QkvNormRopeForwardCuda(x.p, x.p, x.p, f.p, f.p, x.p, nullptr, nullptr, f.p, f.p, 1,
                                      1, 1, 96, 0, sums.p, 1)
                   .ok());
}

// GELU in the cuBLASLt epilogues against MatmulForward + GeluForward and MatmulBackward +
// GeluBackward in double.
TEST(LayersGpu, LtGemmGeluEpilogues) {
  SKIP_WITHOUT_GPU();
  auto gemm_or = LtGemm::Create();
  ASSERT_TRUE(gemm_or.ok()) << gemm_or.status().ToString();
  LtGemm& gemm = **gemm_or;
  const int N = 256, IC = 128, OC = 512;
  auto x = RoundBf16(Randn(size_t(N) * IC, 120));
  auto w = RoundBf16(Randn(size_t(OC) * IC, 121, 0.15f));
  Dev<__nv_bfloat16> dx(ToBf16(x)), dW(ToBf16(w)), act(size_t(N) * OC), pre(size_t(N) * OC);
  const Status st = gemm.ForwardGelu(act.p, pre.p, dx.p, dW.p, N, IC, OC, 0);
  if (st.code() == StatusCode::kUnimplemented) GTEST_SKIP() << st.ToString();
  ASSERT_TRUE(st.ok()) << st.ToString();
  std::vector<double> xd = ToDouble(x), wd = ToDouble(w), ref(size_t(N) * OC), aref(ref.size());
  kernels::MatmulForward(ref.data(), xd.data(), wd.data(), N, IC, OC);
  kernels::GeluForward(aref.data(), ref.data(), int64_t(ref.size()));
  EXPECT_LE(RelL2(FromBf16(pre.Get()), ref), 5e-3);
  EXPECT_LE(RelL2(FromBf16(act.Get()), aref), 5e-3);
  // The activation is GELU of the stored pre-activation (same approximation as the CPU's).
  std::vector<double> pred = ToDouble(FromBf16(pre.Get())), a2(pred.size());
  kernels::GeluForward(a2.data(), pred.data(), int64_t(pred.size()));
  EXPECT_LE(MaxScaledErr(FromBf16(act.Get()), a2, 1e-3, 1e-2), 1.0);

  // Backward through the down projection: dinp (N, OC4) = (dy (N, C) . Wd (C, OC4)) * gelu'(pre).
  const int C = IC, OC4 = OC;
  auto dy = RoundBf16(Randn(size_t(N) * C, 122));
  auto wdn = RoundBf16(Randn(size_t(C) * OC4, 123, 0.1f));
  Dev<__nv_bfloat16> ddy(ToBf16(dy)), dWd(ToBf16(wdn)), dpre(size_t(N) * OC4);
  const Status bs = gemm.BackwardDataDGelu(dpre.p, ddy.p, dWd.p, pre.p, N, OC4, C, 0);
  if (bs.code() == StatusCode::kUnimplemented) GTEST_SKIP() << bs.ToString();
  ASSERT_TRUE(bs.ok()) << bs.ToString();
  std::vector<double> dyd = ToDouble(dy), wdd = ToDouble(wdn), dact(size_t(N) * OC4, 0.0),
                      dwdummy(size_t(C) * OC4, 0.0), dpref(dact.size(), 0.0);
  std::vector<double> actd = ToDouble(FromBf16(act.Get()));
  kernels::MatmulBackward(dact.data(), dwdummy.data(), dyd.data(), actd.data(), wdd.data(), N, OC4,
                          C);
  kernels::GeluBackward(dpref.data(), pred.data(), dact.data(), int64_t(dact.size()));
  EXPECT_LE(RelL2(FromBf16(dpre.Get()), dpref), 6e-3);
}

TEST(LayersGpu, CompareAndMaxLogit) {
  SKIP_WITHOUT_GPU();
  const int BH = 3, Tn = 50, D = 64;
  auto q = RoundBf16(Randn(size_t(BH) * Tn * D, 80));
  auto k = RoundBf16(Randn(q.size(), 81));
  Dev<__nv_bfloat16> dq(ToBf16(q)), dk(ToBf16(k));
  Dev<float> mx(1);
  Dev<double> acc(std::vector<double>(6, 0.0));
  const float tau = 0.125f;
  ASSERT_TRUE(InitMaxCuda(mx.p, 0).ok());
  ASSERT_TRUE(MaxCausalLogitCuda(mx.p, dq.p, dk.p, BH, Tn, D, tau, 0).ok());
  double best = -1e30;
  for (int b = 0; b < BH; ++b) {
    for (int i = 0; i < Tn; ++i) {
      for (int j = 0; j <= i; ++j) {
        double s = 0;
        for (int d = 0; d < D; ++d) s += double(q[(size_t(b) * Tn + i) * D + d]) * k[(size_t(b) * Tn + j) * D + d];
        best = std::max(best, s * tau);
      }
    }
  }
  EXPECT_NEAR(mx.Get()[0], best, 1e-4 * std::fabs(best));
  ASSERT_TRUE((CompareAccumulateCuda<__nv_bfloat16, __nv_bfloat16>(acc.p, dq.p, dk.p, q.size(), 0).ok()));
  auto a = acc.Get();
  double xy = 0, xx = 0;
  for (size_t i = 0; i < q.size(); ++i) {
    xy += double(q[i]) * k[i];
    xx += double(q[i]) * q[i];
  }
  EXPECT_NEAR(a[0], xy, 1e-9 * xx);
  EXPECT_NEAR(a[1], xx, 1e-9 * xx);
}

}  // namespace
}  // namespace ablate::kernels::cuda
