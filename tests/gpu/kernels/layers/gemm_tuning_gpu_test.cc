// LtGemm's GEMM tuning (kernels/layers/cuda/gemm_cuda.h, ablate/gemm_tuning.h) on the device:
// Tune times every problem the LtGemm has run, chooses within its rule and leaves the caller's
// buffers alone; the chosen algorithms compute what the heuristic's do (up to summation order,
// against float64); a second LtGemm replaying the table runs the same algorithms (the same bits)
// and counts them; a table of another device, or entries cuBLASLt refuses, leave the heuristic's
// algorithms (the same bits as without a table). Skips without a GPU.
#include <gtest/gtest.h>

#include <cstring>

#include "gpu/gpu_test_util.h"
#include "layers/cuda/gemm_cuda.h"
#include "layers/layers_cpu.h"

namespace ablate::kernels::cuda {
namespace {

using namespace ::ablate::gputest;  // NOLINT

constexpr int N = 384, IC = 256, OC = 768;

// The inputs of six problems like a GPT layer's: a forward with an fp32 residual (W 16 bytes into
// its buffer, as inside the flat weight buffer), a bf16 forward, the GELU forward, the dGELU data
// backward, an fp32 data backward and an accumulating weight backward.
struct Inputs {
  std::vector<float> x = RoundBf16(Randn(size_t(N) * IC, 200));
  std::vector<float> wbuf = RoundBf16(Randn(size_t(OC) * IC + 8, 201, 0.1f));
  std::vector<float> c = Randn(size_t(N) * OC, 202);
  std::vector<float> dy = RoundBf16(Randn(size_t(N) * OC, 203));
  std::vector<float> dw0 = Randn(size_t(OC) * IC, 204);
  std::vector<float> wd = RoundBf16(Randn(size_t(IC) * OC, 205, 0.1f));  // (IC, OC): down
  std::vector<float> dh = RoundBf16(Randn(size_t(N) * IC, 206));
};

// Every output of one pass over the six problems (fresh output buffers each pass).
struct Outputs {
  std::vector<float> res, fwd, dinp, dw;
  std::vector<__nv_bfloat16> act, pre, dpre, fwd_bits;
  bool gelu = true;
};

Outputs RunAll(LtGemm& g, const Inputs& in) {
  Outputs o;
  Dev<__nv_bfloat16> x(ToBf16(in.x)), wb(ToBf16(in.wbuf)), dy(ToBf16(in.dy)), wd(ToBf16(in.wd)),
      dh(ToBf16(in.dh)), outb(size_t(N) * OC), act(size_t(N) * OC), pre(size_t(N) * OC),
      dpre(size_t(N) * OC);
  Dev<float> res(size_t(N) * OC), c(in.c), dinp(size_t(N) * IC), dw(in.dw0);
  const __nv_bfloat16* W = wb.p + 8;
  EXPECT_TRUE(g.Forward(res.p, OutType::kF32, x.p, W, N, IC, OC, 1.f, 1.f, c.p, 0).ok());
  EXPECT_TRUE(g.Forward(outb.p, OutType::kBF16, x.p, W, N, IC, OC, 1.f, 0.f, nullptr, 0).ok());
  const Status gs = g.ForwardGelu(act.p, pre.p, x.p, W, N, IC, OC, 0);
  // dpre (N, OC) = (dh (N, IC) . wd (IC, OC)) * gelu'(pre): the down projection's data backward.
  const Status ds = gs.ok() ? g.BackwardDataDGelu(dpre.p, dh.p, wd.p, pre.p, N, OC, IC, 0) : gs;
  o.gelu = gs.ok() && ds.ok();
  if (!o.gelu) {
    EXPECT_EQ(gs.ok() ? ds.code() : gs.code(), StatusCode::kUnimplemented);
  }
  EXPECT_TRUE(g.BackwardData(dinp.p, OutType::kF32, dy.p, W, N, IC, OC, 1.f, 0.f, 0).ok());
  EXPECT_TRUE(g.BackwardWeight(dw.p, dy.p, x.p, N, IC, OC, 1.f, 1.f, 0).ok());
  o.res = res.Get();
  o.fwd_bits = outb.Get();
  o.fwd = FromBf16(o.fwd_bits);
  o.act = act.Get();
  o.pre = pre.Get();
  o.dpre = dpre.Get();
  o.dinp = dinp.Get();
  o.dw = dw.Get();
  return o;
}

std::vector<uint16_t> Bits(const std::vector<__nv_bfloat16>& v) {
  std::vector<uint16_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * sizeof(uint16_t));
  return b;
}

// Bit for bit: the same algorithms ran.
void ExpectSameBits(const Outputs& a, const Outputs& b) {
  EXPECT_EQ(a.res, b.res);
  EXPECT_EQ(Bits(a.fwd_bits), Bits(b.fwd_bits));
  EXPECT_EQ(Bits(a.act), Bits(b.act));
  EXPECT_EQ(Bits(a.pre), Bits(b.pre));
  EXPECT_EQ(Bits(a.dpre), Bits(b.dpre));
  EXPECT_EQ(a.dinp, b.dinp);
  EXPECT_EQ(a.dw, b.dw);
}

// Against float64 on the same bf16 values (the tolerances of layers_gpu_test's LtGemm cases).
void ExpectCorrect(const Inputs& in, const Outputs& o) {
  std::vector<double> xd = ToDouble(in.x), wd(in.wbuf.begin() + 8, in.wbuf.end());
  std::vector<double> ref(size_t(N) * OC);
  kernels::MatmulForward(ref.data(), xd.data(), wd.data(), N, IC, OC);
  std::vector<double> ref_c(ref);
  for (size_t i = 0; i < ref_c.size(); ++i) ref_c[i] += in.c[i];
  EXPECT_LE(RelL2(o.res, ref_c), 2e-3);
  EXPECT_LE(RelL2(o.fwd, ref), 5e-3);
  if (o.gelu) {
    EXPECT_LE(RelL2(FromBf16(o.pre), ref), 5e-3);
  }
  std::vector<double> dyd = ToDouble(in.dy), dref(size_t(N) * IC, 0.0), dwref = ToDouble(in.dw0);
  kernels::MatmulBackward(dref.data(), dwref.data(), dyd.data(), xd.data(), wd.data(), N, IC, OC);
  EXPECT_LE(RelL2(o.dinp, dref), 2e-3);
  EXPECT_LE(RelL2(o.dw, dwref), 2e-3);
}

TEST(GemmTuningGpu, TuneChoosesReplaysAndRefuses) {
  SKIP_WITHOUT_GPU();
  const Inputs in;
  auto g_or = LtGemm::Create();
  ASSERT_TRUE(g_or.ok()) << g_or.status().ToString();
  LtGemm& g = **g_or;
  const Outputs heuristic = RunAll(g, in);
  ExpectCorrect(in, heuristic);
  EXPECT_EQ(g.use().problems, heuristic.gelu ? 6 : 4);

  // Tune: one entry per problem, each within the rule, and the caller's buffers untouched (a pass
  // after it reads the same inputs; RunAll makes its own buffers, so check one the LtGemm saw).
  Dev<float> probe(std::vector<float>(size_t(N) * OC, 1.5f));
  Dev<__nv_bfloat16> x(ToBf16(in.x)), wb(ToBf16(in.wbuf));
  ASSERT_TRUE(
      g.Forward(probe.p, OutType::kF32, x.p, wb.p + 8, N, IC, OC, 1.f, 1.f, probe.p, 0).ok());
  const std::vector<float> probe_before = probe.Get();
  const int problems = g.use().problems;  // the probe's problem is the residual forward's
  auto table = g.Tune(8, 5, 0.02, 0);
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  EXPECT_EQ(probe.Get(), probe_before);
  auto here = LtGemm::DeviceAndVersion();
  ASSERT_TRUE(here.ok());
  EXPECT_EQ(table->device, here->first);
  EXPECT_EQ(table->cublaslt_version, here->second);
  EXPECT_EQ(int(table->entries.size()), problems);
  for (const auto& [problem, c] : table->entries) {
    EXPECT_GE(c.candidates, 1) << problem;
    EXPECT_LT(c.candidate, c.candidates) << problem;
    EXPECT_GT(c.heuristic_ms, 0) << problem;
    if (c.candidate == 0) {
      EXPECT_EQ(c.ms, c.heuristic_ms) << problem;
    } else {
      EXPECT_LE(c.ms, 0.98 * c.heuristic_ms) << problem;
    }
    std::printf("%s: candidate %d of %d, %.4f ms (heuristic %.4f)\n", problem.c_str(), c.candidate,
                c.candidates, c.ms, c.heuristic_ms);
  }
  // The tuner's own LtGemm runs the chosen algorithms from now on: still correct.
  const Outputs tuned = RunAll(g, in);
  ExpectCorrect(in, tuned);

  // Replay in a fresh LtGemm: every problem tuned, the tuner's bits, twice.
  auto shared = std::make_shared<const GemmTuning>(*table);
  auto r_or = LtGemm::Create();
  ASSERT_TRUE(r_or.ok());
  LtGemm& r = **r_or;
  ASSERT_TRUE(r.SetTuning(shared).ok());
  const Outputs replay = RunAll(r, in);
  EXPECT_EQ(r.use().problems, problems);
  EXPECT_EQ(r.use().tuned, problems);
  EXPECT_EQ(r.use().rejected, 0);
  ExpectSameBits(replay, tuned);
  ExpectSameBits(RunAll(r, in), tuned);

  // A table of another device: refused as a whole, the heuristic's bits.
  GemmTuning foreign = *table;
  foreign.device = "Some Other GPU";
  const Status fs = r.SetTuning(std::make_shared<const GemmTuning>(foreign));
  EXPECT_EQ(fs.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(fs.message().find("Some Other GPU"), std::string::npos) << fs.message();
  ExpectSameBits(RunAll(r, in), heuristic);
  EXPECT_EQ(r.use().tuned, 0);

  // Entries cuBLASLt refuses for their problem (bytes that describe no algorithm): skipped one by
  // one, counted, the heuristic's bits.
  GemmTuning broken = *table;
  std::array<uint64_t, 8> garbage;
  garbage.fill(~uint64_t(0));
  for (auto& [problem, c] : broken.entries) c.algo = garbage;
  ASSERT_TRUE(r.SetTuning(std::make_shared<const GemmTuning>(broken)).ok());
  ExpectSameBits(RunAll(r, in), heuristic);
  EXPECT_EQ(r.use().rejected, problems);
  EXPECT_EQ(r.use().tuned, 0);
  // And back to none.
  ASSERT_TRUE(r.SetTuning(nullptr).ok());
  ExpectSameBits(RunAll(r, in), heuristic);
  EXPECT_EQ(r.use().problems, problems);
}

TEST(GemmTuningGpu, BadTuneArgumentsAreRefused) {
  SKIP_WITHOUT_GPU();
  auto g_or = LtGemm::Create();
  ASSERT_TRUE(g_or.ok());
  EXPECT_EQ((*g_or)->Tune(0, 5, 0.02, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*g_or)->Tune(8, 0, 0.02, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*g_or)->Tune(8, 5, -1, 0).status().code(), StatusCode::kInvalidArgument);
  // Nothing run yet: an empty table of this device.
  auto t = (*g_or)->Tune(8, 5, 0.02, 0);
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->entries.empty());
}

}  // namespace
}  // namespace ablate::kernels::cuda
