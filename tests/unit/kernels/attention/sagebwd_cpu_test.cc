// SageBwd emulator against exact float64 attention: the published accuracy at sigma = 1, the growth
// of the error with sigma, tile sizes, smoothing, int8 dP, edge cases, float against double, and
// thread-count independence.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ablate/bf16.h"
#include "attention/attention_cpu.h"
#include "attention_test_util.h"

namespace ablate::kernels {
namespace {

using testing::AllFinite;
using testing::Compare;
using testing::Inputs;
using testing::MakeInputs;
using testing::Report;
using testing::Result;
using testing::RunFpa;
using testing::RunSage;

void PrintReport(const std::string& label, const Report& r) {
  std::printf("%-44s cos o %.6f dq %.6f dk %.6f dv %.6f | relL2 o %.4f dq %.4f dk %.4f dv %.4f\n",
              label.c_str(), r.o.cosine, r.dq.cosine, r.dk.cosine, r.dv.cosine, r.o.rel_l2,
              r.dq.rel_l2, r.dk.rel_l2, r.dv.rel_l2);
}

void ExpectPublishedAccuracy(const Report& r) {
  for (const ErrorStats& e : {r.o, r.dq, r.dk, r.dv}) {
    EXPECT_GE(e.cosine, 0.999);
    EXPECT_LE(e.rel_l2, 0.03);
  }
}

bool AllFinite(const Result& r) {
  return AllFinite(r.o) && AllFinite(r.lse) && AllFinite(r.dq) && AllFinite(r.dk) &&
         AllFinite(r.dv);
}

// ---- 2. Accuracy against exact attention at sigma = 1 -----------------------------------------

struct AccuracyCase {
  int n, d;
  bool causal;
};

class SageAccuracyTest : public ::testing::TestWithParam<AccuracyCase> {};

TEST_P(SageAccuracyTest, MatchesExactAttention) {
  const AccuracyCase c = GetParam();
  const AttnShape s{.B = 1, .H = 1, .N = c.n, .D = c.d, .causal = c.causal};
  const Inputs in = MakeInputs(s, 1.0, 100 + c.n + c.d + c.causal);
  const Result ref = RunFpa(in);
  const AttnOptions opt;  // kernel defaults: bq 128, bkv 64, K-smoothing
  char tag[64];
  std::snprintf(tag, sizeof tag, "N=%d D=%d %s", c.n, c.d, c.causal ? "causal" : "full");
  const Result rd = RunSage<double>(in, opt);
  ASSERT_TRUE(AllFinite(rd));
  const Report ed = Compare(rd, ref);
  PrintReport(std::string("sage<double> ") + tag, ed);
  ExpectPublishedAccuracy(ed);
  const Result rf = RunSage<float>(in, opt);
  ASSERT_TRUE(AllFinite(rf));
  const Report ef = Compare(rf, ref);
  PrintReport(std::string("sage<float>  ") + tag, ef);
  ExpectPublishedAccuracy(ef);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SageAccuracyTest,
    ::testing::Values(AccuracyCase{128, 64, false}, AccuracyCase{128, 64, true},
                      AccuracyCase{128, 128, false}, AccuracyCase{128, 128, true},
                      AccuracyCase{1000, 64, false}, AccuracyCase{1000, 64, true},
                      AccuracyCase{1000, 128, false}, AccuracyCase{1000, 128, true},
                      AccuracyCase{4096, 64, false}, AccuracyCase{4096, 64, true},
                      AccuracyCase{4096, 128, false}, AccuracyCase{4096, 128, true}),
    [](const auto& info) {
      char name[48];
      std::snprintf(name, sizeof name, "N%d_D%d_%s", info.param.n, info.param.d,
                    info.param.causal ? "causal" : "full");
      return std::string(name);
    });

// ---- 3. Error growth with sigma_Q = sigma_K
// ------------------------------------------------------

TEST(SageSigmaTest, ErrorsGrowWithSigma) {
  const AttnShape s{.B = 1, .H = 1, .N = 1024, .D = 64, .causal = false};
  const double sigmas[] = {1, 3, 5, 8};
  std::vector<Report> reports;
  std::printf("sigma | cos o    dq       dk       dv      | relL2 o  dq      dk      dv\n");
  for (double sigma : sigmas) {
    const Inputs in = MakeInputs(s, sigma, 200);
    const Report r = Compare(RunSage<double>(in, AttnOptions{}), RunFpa(in));
    std::printf("%5.0f | %.5f  %.5f  %.5f  %.5f | %.4f  %.4f  %.4f  %.4f\n", sigma, r.o.cosine,
                r.dq.cosine, r.dk.cosine, r.dv.cosine, r.o.rel_l2, r.dq.rel_l2, r.dk.rel_l2,
                r.dv.rel_l2);
    reports.push_back(r);
  }
  // dQ and dK degrade first and fastest (through the logits' quantization, which softmax
  // amplifies: SageProductsTest and the probes' decomposition): strictly worse at each step.
  for (size_t x = 1; x < reports.size(); ++x) {
    EXPECT_GT(reports[x].dq.rel_l2, reports[x - 1].dq.rel_l2) << "sigma " << sigmas[x];
    EXPECT_GT(reports[x].dk.rel_l2, reports[x - 1].dk.rel_l2) << "sigma " << sigmas[x];
  }
  EXPECT_GT(reports.back().dq.rel_l2, 3 * reports.front().dq.rel_l2);
  EXPECT_LT(reports.back().dq.cosine, reports.front().dq.cosine);
}

// The mechanism probes' decomposition (AttnOptions::int8_products): each product, alone in INT8,
// adds error exactly to the outputs downstream of it, and none at all leaves exact attention (the
// inputs are bf16 values, so bf16 dP operands are exact).
TEST(SageProductsTest, EachProductErrsOnlyDownstream) {
  const AttnShape s{.B = 1, .H = 2, .N = 200, .D = 64, .causal = true};
  Inputs in = MakeInputs(s, 3.0, 300);
  for (auto* x : {&in.q, &in.k, &in.v, &in.dout}) {
    for (double& e : *x) e = RoundToBf16(e);
  }
  const Result ref = RunFpa(in);
  struct Case {
    uint32_t mask;
    bool o, dq, dk, dv;  // which outputs err
  };
  const Case cases[] = {{0, false, false, false, false},      {kSageS, true, true, true, true},
                        {kSagePV, true, true, true, false},  // dQ, dK through D = rowsum(dO o O)
                        {kSageDV, false, false, false, true}, {kSageDQ, false, true, false, false},
                        {kSageDK, false, false, true, false}};
  for (const Case& c : cases) {
    AttnOptions opt;
    opt.int8_products = c.mask;
    const Report r = Compare(RunSage<double>(in, opt), ref);
    PrintReport("int8_products " + std::to_string(c.mask), r);
    const std::pair<double, bool> outs[] = {
        {r.o.rel_l2, c.o}, {r.dq.rel_l2, c.dq}, {r.dk.rel_l2, c.dk}, {r.dv.rel_l2, c.dv}};
    for (const auto& [err, errs] : outs) {
      if (errs) {
        EXPECT_GT(err, 1e-3) << "mask " << c.mask;
      } else {
        EXPECT_LT(err, 1e-9) << "mask " << c.mask;
      }
    }
  }
  // ds_bf16: the dS products with bf16 operands instead of INT8. O and dV are the INT8 run's
  // exactly; dQ and dK lose their own INT8 rounding (less error, but not none).
  {
    AttnOptions int8, bf16;
    bf16.ds_bf16 = true;
    const Result ri = RunSage<double>(in, int8), rb = RunSage<double>(in, bf16);
    EXPECT_EQ(rb.o, ri.o);
    EXPECT_EQ(rb.dv, ri.dv);
    const Report ei = Compare(ri, ref), eb = Compare(rb, ref);
    PrintReport("ds_bf16", eb);
    EXPECT_LT(eb.dq.rel_l2, ei.dq.rel_l2);
    EXPECT_LT(eb.dk.rel_l2, ei.dk.rel_l2);
    EXPECT_GT(eb.dq.rel_l2, 1e-3);  // the logits' and P~V's errors remain
  }
  // int8_dp's product alone: dQ and dK err, O and dV do not.
  AttnOptions dp;
  dp.int8_dp = true;
  dp.int8_products = kSageDP;
  const Report r = Compare(RunSage<double>(in, dp), ref);
  EXPECT_LT(r.o.rel_l2, 1e-9);
  EXPECT_LT(r.dv.rel_l2, 1e-9);
  EXPECT_GT(r.dq.rel_l2, 1e-3);
  EXPECT_GT(r.dk.rel_l2, 1e-3);
}

// Finer backward scale groups (the probes' granularity): a group as large as the block is the
// default exactly; groups of 16 lower the error of the product they feed at sigma 1 and leave the
// others' outputs as they were.
TEST(SageProductsTest, FinerScaleGroupsAreExactAtBlockSizeAndHelpTheirProduct) {
  const AttnShape s{.B = 1, .H = 2, .N = 256, .D = 64, .causal = true};
  const Inputs in = MakeInputs(s, 1.0, 400);
  const Result ref = RunFpa(in);
  const AttnOptions base;  // bq 128, bkv 64
  AttnOptions whole = base;
  whole.ds_row_keys = base.bkv;
  whole.ds_col_rows = base.bq;
  whole.p_col_rows = base.bq;
  const Result rb = RunSage<double>(in, base), rw = RunSage<double>(in, whole);
  EXPECT_EQ(rw.dq, rb.dq);
  EXPECT_EQ(rw.dk, rb.dk);
  EXPECT_EQ(rw.dv, rb.dv);
  const Report eb = Compare(rb, ref);
  AttnOptions q16 = base, k16 = base, v16 = base;
  q16.ds_row_keys = 16;
  k16.ds_col_rows = 16;
  v16.p_col_rows = 16;
  const Result rq = RunSage<double>(in, q16), rk = RunSage<double>(in, k16),
               rv = RunSage<double>(in, v16);
  EXPECT_LT(Compare(rq, ref).dq.rel_l2, eb.dq.rel_l2);
  EXPECT_EQ(rq.dk, rb.dk);
  EXPECT_EQ(rq.dv, rb.dv);
  EXPECT_LT(Compare(rk, ref).dk.rel_l2, eb.dk.rel_l2);
  EXPECT_EQ(rk.dq, rb.dq);
  EXPECT_LT(Compare(rv, ref).dv.rel_l2, eb.dv.rel_l2);
  EXPECT_EQ(rv.dq, rb.dq);
  EXPECT_EQ(rv.o, rb.o);
}

// ---- 4. Options: tiles, smoothing, int8 dP
// --------------------------------------------------------

TEST(SageOptionsTest, HugeAndTinyTilesStayAccurate) {
  const AttnShape s{.B = 1, .H = 2, .N = 300, .D = 64, .causal = true};
  const Inputs in = MakeInputs(s, 1.0, 300);
  const Result ref = RunFpa(in);
  AttnOptions huge;
  huge.bq = huge.bkv = 512;  // one tile covers the sequence
  AttnOptions tiny;
  tiny.bq = 16;
  tiny.bkv = 8;
  const Report rh = Compare(RunSage<double>(in, huge), ref);
  const Report rt = Compare(RunSage<double>(in, tiny), ref);
  PrintReport("tiles 512x512", rh);
  PrintReport("tiles 16x8", rt);
  ExpectPublishedAccuracy(rh);
  ExpectPublishedAccuracy(rt);
  // Finer tiles mean finer Q and K scales: the forward gets strictly better.
  EXPECT_LT(rt.o.rel_l2, rh.o.rel_l2);
}

// K / V quantization groups of kv_group keys (the forward's K tile; the backward keeps bkv-key
// blocks and reads the group scales): kv_group = bkv is the default exactly, 128-key groups keep
// the published accuracy (with somewhat coarser K and V scales), the O error grows a little.
TEST(SageOptionsTest, KvGroupsOfTwoTiles) {
  for (bool causal : {false, true}) {
    const AttnShape s{.B = 1, .H = 2, .N = 1000, .D = 128, .causal = causal};
    const Inputs in = MakeInputs(s, 1.0, 310 + causal);
    AttnOptions base;
    base.bq = 64;
    base.bkv = 64;
    AttnOptions same = base;
    same.kv_group = 64;
    AttnOptions pair = base;
    pair.kv_group = 128;
    const Result rb = RunSage<double>(in, base), rs = RunSage<double>(in, same);
    EXPECT_EQ(rb.o, rs.o);
    EXPECT_EQ(rb.dq, rs.dq);
    EXPECT_EQ(rb.dk, rs.dk);
    EXPECT_EQ(rb.dv, rs.dv);
    const Result rp = RunSage<double>(in, pair);
    ASSERT_TRUE(AllFinite(rp));
    const Result ref = RunFpa(in);
    const Report eb = Compare(rb, ref), ep = Compare(rp, ref);
    PrintReport(causal ? "kv_group 64 causal" : "kv_group 64 full", eb);
    PrintReport(causal ? "kv_group 128 causal" : "kv_group 128 full", ep);
    ExpectPublishedAccuracy(ep);
    EXPECT_NE(rp.o, rb.o);  // the groups (and the forward's tiles) do change the arithmetic
    EXPECT_LT(ep.o.rel_l2, 1.5 * eb.o.rel_l2);
    // The d128 production backward (SageBwdKeyBlock): 128-key blocks, so dS^ for dQ has one
    // scale per query row over 128 keys. The forward and the per-key-column quantities (dV, dK)
    // are those of 64-key blocks exactly; dQ changes and keeps the published accuracy.
    AttnOptions pair_bwd = pair;
    pair_bwd.bkv = 128;
    const Result rq = RunSage<double>(in, pair_bwd);
    EXPECT_EQ(rq.o, rp.o);
    EXPECT_EQ(rq.dv, rp.dv);
    EXPECT_EQ(rq.dk, rp.dk);
    EXPECT_NE(rq.dq, rp.dq);
    const Report eq = Compare(rq, ref);
    PrintReport(causal ? "kv_group 128 bkv 128 causal" : "kv_group 128 bkv 128 full", eq);
    ExpectPublishedAccuracy(eq);
    EXPECT_LT(eq.dq.rel_l2, 1.5 * ep.dq.rel_l2);
  }
}

// K with a large common offset: the softmax ignores it, an unsmoothed quantizer does not.
TEST(SageOptionsTest, KSmoothingRemovesKeyOffset) {
  const AttnShape s{.B = 1, .H = 1, .N = 512, .D = 64, .causal = true};
  Inputs in = MakeInputs(s, 1.0, 400);
  std::mt19937_64 rng(401);
  const std::vector<double> offset = testing::RandomNormal(rng, s.D, 8.0);
  for (int n = 0; n < s.N; ++n) {
    for (int d = 0; d < s.D; ++d) in.k[n * s.D + d] += offset[d];
  }
  const Result ref = RunFpa(in);
  AttnOptions on, off;  // the defaults: K-smoothing without the dQ correction
  off.smooth_k = false;
  const Report e_on = Compare(RunSage<double>(in, on), ref);
  const Report e_off = Compare(RunSage<double>(in, off), ref);
  PrintReport("key offset, smooth_k on", e_on);
  PrintReport("key offset, smooth_k off", e_off);
  ExpectPublishedAccuracy(e_on);  // every output back at its offset-free accuracy, dQ included
  EXPECT_GT(e_off.o.rel_l2, 2 * e_on.o.rel_l2);
  EXPECT_GT(e_off.dk.rel_l2, 2 * e_on.dk.rel_l2);
  EXPECT_GT(e_off.dv.rel_l2, 2 * e_on.dv.rel_l2);
  EXPECT_GT(e_off.dq.rel_l2, 2 * e_on.dq.rel_l2);

  // The dQ correction tau * rowsum(dS) (x) kbar (dq_kmean_correction, off by default since
  // numerics 3). Its exact value is zero: exact dS rows sum to zero. The emulated dS rows do not
  // (the forward's P~V quantization error reaches them through D_i = rowsum(dO o O)), so the term
  // adds that error times |kbar|, and with this offset dQ is several times worse with it; the
  // other outputs do not depend on it.
  AttnOptions corrected;
  corrected.dq_kmean_correction = true;
  SageDebug<double> dbg;
  SageSaved<double> saved;
  const Result r_corr = RunSage<double>(in, corrected, &dbg, &saved);
  const Report e_corr = Compare(r_corr, ref);
  std::printf("key offset: dQ relL2 %.4f with the kbar correction, %.4f without\n",
              e_corr.dq.rel_l2, e_on.dq.rel_l2);
  EXPECT_GT(e_corr.dq.rel_l2, 3 * e_on.dq.rel_l2);
  EXPECT_EQ(e_corr.dk.rel_l2, e_on.dk.rel_l2);
  // And the term is exactly what the corrected dQ adds.
  const Result r_plain = RunSage<double>(in, on);
  const double tau = 1.0 / std::sqrt(double(s.D));
  double worst = 0;
  for (int r = 0; r < s.N; ++r) {
    double rowsum = 0;
    for (int c = 0; c < s.N; ++c) rowsum += dbg.ds[int64_t(r) * s.N + c];
    for (int d = 0; d < s.D; ++d) {
      worst = std::max(worst, std::fabs(r_corr.dq[r * s.D + d] - r_plain.dq[r * s.D + d] -
                                        tau * rowsum * saved.kmean[d]));
    }
  }
  EXPECT_LT(worst, 1e-9);
}

// LSE lives in the smoothed domain: L_true = L_smoothed + tau * q . kbar.
TEST(SageOptionsTest, LseIsInTheSmoothedDomain) {
  const AttnShape s{.B = 1, .H = 2, .N = 200, .D = 64, .causal = true};
  Inputs in = MakeInputs(s, 1.0, 450);
  for (int64_t x = 0; x < s.numel(); ++x) in.k[x] += 0.5 * ((x % s.D) % 3);  // nonzero mean
  const Result ref = RunFpa(in);
  SageSaved<double> saved;
  const Result r = RunSage<double>(in, AttnOptions{}, nullptr, &saved);
  const double tau = 1.0 / std::sqrt(double(s.D));
  double worst = 0;
  for (int bh = 0; bh < s.B * s.H; ++bh) {
    for (int n = 0; n < s.N; ++n) {
      double qk = 0;
      for (int d = 0; d < s.D; ++d) {
        qk += in.q[(int64_t(bh) * s.N + n) * s.D + d] * saved.kmean[bh * s.D + d];
      }
      const int64_t row = int64_t(bh) * s.N + n;
      worst = std::max(worst, std::fabs(r.lse[row] + tau * qk - ref.lse[row]));
    }
  }
  std::printf("max |lse_sage + tau q.kbar - lse_exact| = %.3e\n", worst);
  EXPECT_LT(worst, 0.05);
  // The K mean itself is saved.
  double mean0 = 0;
  for (int n = 0; n < s.N; ++n) mean0 += in.k[n * s.D + 1];
  EXPECT_NEAR(saved.kmean[1], mean0 / s.N, 1e-12);
}

// Q with a large offset per tile. Q-smoothing quantizes Q - mu_Q and adds tau mu_Q . K^T back in
// full precision; dropping that bias (emulated by smoothing Q by hand and switching Q-smoothing
// off, which quantizes the same Q - mu_Q) changes the attention completely.
TEST(SageOptionsTest, QSmoothingIsAccurateAndItsBiasMatters) {
  const AttnShape s{.B = 1, .H = 1, .N = 256, .D = 64, .causal = false};
  Inputs in = MakeInputs(s, 1.0, 500);
  std::mt19937_64 rng(501);
  const std::vector<double> offset = testing::RandomNormal(rng, s.D, 1.0);
  for (int n = 0; n < s.N; ++n) {
    for (int d = 0; d < s.D; ++d) in.q[n * s.D + d] += offset[d];
  }
  const Result ref = RunFpa(in);
  AttnOptions sq;
  sq.smooth_q = true;
  const Report r_sq = Compare(RunSage<double>(in, sq), ref);
  PrintReport("query offset, smooth_q on", r_sq);
  ExpectPublishedAccuracy(r_sq);
  const Report r_plain = Compare(RunSage<double>(in, AttnOptions{}), ref);
  PrintReport("query offset, smooth_q off", r_plain);
  ExpectPublishedAccuracy(r_plain);

  Inputs no_bias = in;
  const int bq = sq.bq;
  for (int t = 0; t * bq < s.N; ++t) {
    const int rows = std::min(bq, s.N - t * bq);
    for (int d = 0; d < s.D; ++d) {
      double mu = 0;
      for (int r = 0; r < rows; ++r) mu += in.q[(t * bq + r) * s.D + d];
      mu /= rows;
      for (int r = 0; r < rows; ++r) no_bias.q[(t * bq + r) * s.D + d] -= mu;
    }
  }
  const Result rn = RunSage<double>(no_bias, AttnOptions{});
  const Report r_nb = Compare(rn, ref);
  PrintReport("query offset, smoothed without bias", r_nb);
  EXPECT_GT(r_nb.o.rel_l2, 0.1);
  EXPECT_GT(r_nb.o.rel_l2, 5 * r_sq.o.rel_l2);
}

// Quantizing dP too (int8_dp) makes dS, and with it dQ and dK, less accurate.
TEST(SageOptionsTest, Int8DpDegradesDs) {
  const AttnShape s{.B = 1, .H = 2, .N = 256, .D = 64, .causal = true};
  const Inputs in = MakeInputs(s, 1.0, 600);
  const Result ref = RunFpa(in);
  std::vector<double> p_ref, ds_ref;
  FpaIntermediates<double>(s, in.q.data(), in.k.data(), in.v.data(), ref.o.data(), ref.lse.data(),
                           in.dout.data(), &p_ref, &ds_ref);
  AttnOptions bf16_dp, int8_dp;
  int8_dp.int8_dp = true;
  SageDebug<double> dbg_bf16, dbg_int8;
  const Report r_bf16 = Compare(RunSage<double>(in, bf16_dp, &dbg_bf16), ref);
  const Report r_int8 = Compare(RunSage<double>(in, int8_dp, &dbg_int8), ref);
  const int64_t nn = int64_t(s.B) * s.H * s.N * s.N;
  const ErrorStats ds_bf16 = CompareTensors(dbg_bf16.ds.data(), ds_ref.data(), nn);
  const ErrorStats ds_int8 = CompareTensors(dbg_int8.ds.data(), ds_ref.data(), nn);
  PrintReport("dP in bf16", r_bf16);
  PrintReport("dP in int8", r_int8);
  std::printf("dS relL2: bf16 dP %.4f, int8 dP %.4f\n", ds_bf16.rel_l2, ds_int8.rel_l2);
  EXPECT_GT(ds_int8.rel_l2, 1.2 * ds_bf16.rel_l2);
  EXPECT_GT(r_int8.dq.rel_l2, r_bf16.dq.rel_l2);
  EXPECT_GT(r_int8.dk.rel_l2, r_bf16.dk.rel_l2);
  // The forward does not depend on dP.
  EXPECT_EQ(r_int8.o.rel_l2, r_bf16.o.rel_l2);
}

// The debug capture: P and dS of the backward, full N x N, against the exact intermediates.
TEST(SageDebugTest, CapturesPAndDs) {
  const AttnShape s{.B = 2, .H = 1, .N = 150, .D = 64, .causal = true};
  const Inputs in = MakeInputs(s, 1.0, 700);
  const Result ref = RunFpa(in);
  std::vector<double> p_ref, ds_ref;
  FpaIntermediates<double>(s, in.q.data(), in.k.data(), in.v.data(), ref.o.data(), ref.lse.data(),
                           in.dout.data(), &p_ref, &ds_ref);
  SageDebug<double> dbg;
  RunSage<double>(in, AttnOptions{}, &dbg);
  const int64_t nn = int64_t(s.B) * s.H * s.N * s.N;
  ASSERT_EQ(int64_t(dbg.p.size()), nn);
  ASSERT_EQ(int64_t(dbg.ds.size()), nn);
  const ErrorStats ep = CompareTensors(dbg.p.data(), p_ref.data(), nn);
  const ErrorStats eds = CompareTensors(dbg.ds.data(), ds_ref.data(), nn);
  std::printf("debug P: cos %.6f relL2 %.4f; dS: cos %.6f relL2 %.4f\n", ep.cosine, ep.rel_l2,
              eds.cosine, eds.rel_l2);
  EXPECT_GE(ep.cosine, 0.9999);
  EXPECT_GE(eds.cosine, 0.999);
  for (int bh = 0; bh < s.B * s.H; ++bh) {
    for (int i = 0; i < s.N; ++i) {
      for (int j = i + 1; j < s.N; ++j) {
        const int64_t x = (int64_t(bh) * s.N + i) * s.N + j;
        ASSERT_EQ(dbg.p[x], 0.0);
        ASSERT_EQ(dbg.ds[x], 0.0);
      }
    }
  }
}

// ---- 5. Edge cases
// -------------------------------------------------------------------------------

// N not a multiple of either tile, tiles of different heights so that causal blocks are fully
// masked, partially masked and padded; every output element is written (RunSage starts from NaN).
TEST(SageEdgeTest, RaggedTilesAndMaskedBlocks) {
  for (bool causal : {true, false}) {
    for (auto [bq, bkv] : {std::pair{32, 16}, std::pair{16, 32}, std::pair{77, 5}}) {
      const AttnShape s{.B = 2, .H = 2, .N = 77, .D = 64, .causal = causal};
      const Inputs in = MakeInputs(s, 1.0, 800 + bq);
      AttnOptions opt;
      opt.bq = bq;
      opt.bkv = bkv;
      const Result r = RunSage<double>(in, opt);
      ASSERT_TRUE(AllFinite(r)) << bq << "x" << bkv;
      const Report e = Compare(r, RunFpa(in));
      char label[64];
      std::snprintf(label, sizeof label, "N=77 tiles %dx%d %s", bq, bkv,
                    causal ? "causal" : "full");
      PrintReport(label, e);
      ExpectPublishedAccuracy(e);
    }
  }
}

// Identical keys: with K-smoothing every K tile is exactly zero (the scale guard), the logits are
// all zero and the attention is the plain mean of the visible values. Keys are multiples of 1/8 so
// that their mean is exact and K - kbar is exactly zero.
TEST(SageEdgeTest, AllZeroSmoothedKeys) {
  const AttnShape s{.B = 1, .H = 1, .N = 200, .D = 64, .causal = true};
  Inputs in = MakeInputs(s, 1.0, 900);
  for (int n = 0; n < s.N; ++n) {
    for (int d = 0; d < s.D; ++d) in.k[n * s.D + d] = std::round(8 * in.k[d]) / 8;
  }
  const Result ref = RunFpa(in);
  SageDebug<double> dbg;
  SageSaved<double> saved;
  const Result r = RunSage<double>(in, AttnOptions{}, &dbg, &saved);
  ASSERT_TRUE(AllFinite(r));
  const Report e = Compare(r, ref);
  // The exact dQ is zero here, so only o, dk and dv have a meaningful relative error.
  std::printf("identical keys: relL2 o %.4f dk %.4f dv %.4f\n", e.o.rel_l2, e.dk.rel_l2,
              e.dv.rel_l2);
  for (const ErrorStats& x : {e.o, e.dk, e.dv}) {
    EXPECT_GE(x.cosine, 0.999);
    EXPECT_LE(x.rel_l2, 0.03);
  }
  for (int n = 0; n < s.N; ++n) ASSERT_NEAR(r.lse[n], std::log(double(n + 1)), 1e-12);
  // K^ = 0, so dQ is exactly zero, as the exact dQ is; with the dQ correction it would be the
  // kbar term alone: the rows of the emulated dS do not sum to exactly zero.
  for (int64_t x = 0; x < s.numel(); ++x) ASSERT_EQ(r.dq[x], 0.0);
  AttnOptions corrected;
  corrected.dq_kmean_correction = true;
  const Result rc = RunSage<double>(in, corrected);
  const double tau = 1.0 / std::sqrt(double(s.D));
  double largest = 0;
  for (int n = 0; n < s.N; ++n) {
    double rowsum = 0;
    for (int c = 0; c < s.N; ++c) rowsum += dbg.ds[int64_t(n) * s.N + c];
    for (int d = 0; d < s.D; ++d) {
      ASSERT_NEAR(rc.dq[n * s.D + d], tau * rowsum * saved.kmean[d], 1e-12);
      largest = std::max(largest, std::fabs(rc.dq[n * s.D + d]));
    }
  }
  EXPECT_GT(largest, 0.0);
}

// A K tile, a V tile and a Q tile that are exactly zero, without smoothing.
TEST(SageEdgeTest, ZeroTilesWithoutSmoothing) {
  const AttnShape s{.B = 1, .H = 1, .N = 256, .D = 64, .causal = true};
  Inputs in = MakeInputs(s, 1.0, 1000);
  AttnOptions opt;
  opt.smooth_k = false;
  for (int n = opt.bkv; n < 2 * opt.bkv; ++n) {
    for (int d = 0; d < s.D; ++d) {
      in.k[n * s.D + d] = 0;
      in.v[(n + opt.bkv) * s.D + d] = 0;
    }
  }
  for (int n = opt.bq; n < 2 * opt.bq; ++n) {
    for (int d = 0; d < s.D; ++d) in.q[n * s.D + d] = 0;
  }
  const Result r = RunSage<double>(in, opt);
  ASSERT_TRUE(AllFinite(r));
  const Report e = Compare(r, RunFpa(in));
  PrintReport("zero K, V and Q tiles", e);
  ExpectPublishedAccuracy(e);
}

// Zero upstream gradient: every quantizer sees zero groups and every gradient is exactly zero.
TEST(SageEdgeTest, ZeroUpstreamGradient) {
  const AttnShape s{.B = 1, .H = 2, .N = 100, .D = 64, .causal = true};
  Inputs in = MakeInputs(s, 1.0, 1100);
  std::fill(in.dout.begin(), in.dout.end(), 0.0);
  for (bool int8_dp : {false, true}) {
    AttnOptions opt;
    opt.int8_dp = int8_dp;
    opt.smooth_q = true;
    const Result r = RunSage<float>(in, opt);
    for (int64_t x = 0; x < s.numel(); ++x) {
      ASSERT_EQ(r.dq[x], 0.0);
      ASSERT_EQ(r.dk[x], 0.0);
      ASSERT_EQ(r.dv[x], 0.0);
    }
  }
}

// ---- 6. Float against double
// ----------------------------------------------------------------------

// The same quantization decisions in float and double except rare rounding ties, so the two
// emulators agree far more closely than either agrees with exact attention.
TEST(SageFloatTest, FloatMatchesDouble) {
  const AttnShape s{.B = 2, .H = 2, .N = 333, .D = 64, .causal = true};
  const Inputs in = MakeInputs(s, 1.0, 1200);
  for (bool smooth_q : {false, true}) {
    AttnOptions opt;
    opt.smooth_q = smooth_q;
    const Result rd = RunSage<double>(in, opt);
    const Result rf = RunSage<float>(in, opt);
    const Report e = Compare(rf, rd);
    PrintReport(smooth_q ? "sage<float> vs sage<double>, smooth_q" : "sage<float> vs sage<double>",
                e);
    EXPECT_LT(e.worst_rel_l2(), 1e-3);
    const Report to_exact = Compare(rd, RunFpa(in));
    EXPECT_LT(e.worst_rel_l2(), 0.1 * to_exact.worst_rel_l2());
  }
}

// ---- Determinism
// -----------------------------------------------------------------------------------

TEST(SageDeterminismTest, IndependentOfThreadCount) {
  const AttnShape s{.B = 2, .H = 3, .N = 200, .D = 64, .causal = true};
  const Inputs in = MakeInputs(s, 1.0, 1300);
  AttnOptions opt;
  opt.smooth_q = true;
  const int saved_threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const Result one = RunSage<float>(in, opt);
  omp_set_num_threads(3);
  const Result three = RunSage<float>(in, opt);
  omp_set_num_threads(saved_threads);
  EXPECT_EQ(one.o, three.o);
  EXPECT_EQ(one.lse, three.lse);
  EXPECT_EQ(one.dq, three.dq);
  EXPECT_EQ(one.dk, three.dk);
  EXPECT_EQ(one.dv, three.dv);
}

}  // namespace
}  // namespace ablate::kernels
