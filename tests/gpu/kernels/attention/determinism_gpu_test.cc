// The deterministic attention backward (AttnOptions::deterministic, attention_cuda.h), label gpu:
//  - DeterministicGpu.RerunsBitIdentical: for FPA and SageBwd (d64, d128; causal or not; SageBwd
//    with Q-smoothing, int8 dP, with the dQ correction, with the dS products in bf16), three
//    backward calls after one forward give the same bits of dQ, dK and dV, with the scratch filled
//    with NaN before each call (a slice row that a call reads without having zeroed it would show);
//    and dQ equals the atomics' dQ up to the order of the fp32 sums (rel L2 <= 1e-3), dK and dV
//    exactly.
//  - DetCudaArgs (no GPU needed, label unit): a deterministic backward without its scratch, or
//    with a short one, is InvalidArgument.
// Lengths: a multiple of the key blocks, one with a partial last block, and 16+ slices.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "attention/cuda/attention_cuda.h"
#include "gpu/gpu_test_util.h"

namespace ablate::kernels {
namespace {

using gputest::Dev;

std::string Describe(const AttnShape& s, const AttnOptions& o) {
  return std::string(o.kind == AttnKind::kFpa ? "fpa" : "sagebwd") + " B" + std::to_string(s.B) +
         " H" + std::to_string(s.H) + " N" + std::to_string(s.N) + " D" + std::to_string(s.D) +
         (s.causal ? " causal" : "") + (o.smooth_q ? " smooth_q" : "") +
         (o.int8_dp ? " int8_dp" : "") + (o.dq_kmean_correction ? " dq-correction" : "") +
         (o.ds_bf16 ? " ds_bf16" : "");
}

struct Grads {
  std::vector<uint16_t> dq, dk, dv;
};

std::vector<uint16_t> Bits(const Dev<__nv_bfloat16>& d) {
  const std::vector<__nv_bfloat16> h = d.Get();
  std::vector<uint16_t> b(h.size());
  std::memcpy(b.data(), h.data(), 2 * h.size());
  return b;
}

double RelL2(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    float x, y;
    const uint32_t xa = uint32_t(a[i]) << 16, yb = uint32_t(b[i]) << 16;
    std::memcpy(&x, &xa, 4);
    std::memcpy(&y, &yb, 4);
    num += (double(x) - y) * (double(x) - y);
    den += double(y) * y;
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

// One forward, then `calls` backward calls; the gradients of each call.
std::vector<Grads> RunBackward(const AttnShape& s, const AttnOptions& opt, int calls) {
  const size_t n = size_t(s.numel());
  Dev<__nv_bfloat16> q(gputest::ToBf16(gputest::Randn(n, 11))),
      k(gputest::ToBf16(gputest::Randn(n, 12))), v(gputest::ToBf16(gputest::Randn(n, 13))),
      dout(gputest::ToBf16(gputest::Randn(n, 14))), o(n), dq(n), dk(n), dv(n);
  Dev<float> lse(size_t(s.rows()));
  const size_t wsb = std::max<size_t>(AttnWorkspaceBytes(s, opt), 256);
  const size_t detb = std::max<size_t>(AttnDetScratchBytes(s, opt), 256);
  Dev<char> ws(wsb), det(detb);
  std::vector<Grads> out;
  EXPECT_TRUE(AttnForwardCuda(s, opt, q.p, k.p, v.p, o.p, lse.p, ws.p, wsb, nullptr).ok());
  for (int c = 0; c < calls; ++c) {
    EXPECT_EQ(cudaMemset(det.p, 0xFF, detb), cudaSuccess);  // f32 NaN in every slice
    EXPECT_EQ(cudaMemset(dq.p, 0xFF, 2 * n), cudaSuccess);
    const Status st = AttnBackwardCuda(s, opt, q.p, k.p, v.p, o.p, lse.p, dout.p, dq.p, dk.p, dv.p,
                                       ws.p, wsb, nullptr, det.p, detb);
    EXPECT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    out.push_back({Bits(dq), Bits(dk), Bits(dv)});
  }
  return out;
}

TEST(DeterministicGpu, RerunsBitIdentical) {
  SKIP_WITHOUT_GPU();
  struct Case {
    AttnShape s;
    AttnKind kind;
    bool smooth_q = false, int8_dp = false, correction = false, ds_bf16 = false;
  };
  std::vector<Case> cases;
  for (int d : {64, 128}) {
    for (bool causal : {true, false}) {
      for (int n : {512, 1000}) {
        cases.push_back({{2, 3, n, d, causal}, AttnKind::kFpa});
        cases.push_back({{2, 3, n, d, causal}, AttnKind::kSageBwd});
      }
    }
    cases.push_back({{2, 2, 700, d, true}, AttnKind::kSageBwd, /*smooth_q=*/true});
    cases.push_back({{2, 2, 700, d, false}, AttnKind::kSageBwd, false, /*int8_dp=*/true});
    cases.push_back({{2, 2, 700, d, true}, AttnKind::kSageBwd, false, false, /*correction=*/true});
    for (bool causal : {true, false}) {
      cases.push_back({{2, 2, 700, d, causal},
                       AttnKind::kSageBwd,
                       false,
                       false,
                       false,
                       /*ds_bf16=*/true});
    }
    cases.push_back({{2, 2, 700, d, true},
                     AttnKind::kSageBwd,
                     false,
                     /*int8_dp=*/true,
                     false,
                     /*ds_bf16=*/true});
  }
  cases.push_back({{1, 4, 2112, 128, true}, AttnKind::kFpa});      // 17 slices
  cases.push_back({{1, 4, 2112, 128, true}, AttnKind::kSageBwd});  // 17 slices
  cases.push_back({{1, 4, 1088, 64, true}, AttnKind::kSageBwd});   // 17 slices of 64 keys
  for (const Case& c : cases) {
    AttnOptions opt;
    opt.kind = c.kind;
    opt.smooth_q = c.smooth_q;
    opt.int8_dp = c.int8_dp;
    opt.dq_kmean_correction = c.correction;
    opt.ds_bf16 = c.ds_bf16;
    AttnOptions atomics = opt;
    opt.deterministic = true;
    const std::string what = Describe(c.s, opt);
    const std::vector<Grads> det = RunBackward(c.s, opt, 3);
    const std::vector<Grads> ref = RunBackward(c.s, atomics, 1);
    if (::testing::Test::HasFailure()) return;
    for (int r = 1; r < 3; ++r) {
      EXPECT_TRUE(det[r].dq == det[0].dq) << "dQ differs on rerun " << r << ": " << what;
      EXPECT_TRUE(det[r].dk == det[0].dk) << "dK differs on rerun " << r << ": " << what;
      EXPECT_TRUE(det[r].dv == det[0].dv) << "dV differs on rerun " << r << ": " << what;
    }
    const double rel = RelL2(det[0].dq, ref[0].dq);
    EXPECT_LE(rel, 1e-3) << "dQ against the atomics' " << what;  // NaN fails too
    EXPECT_TRUE(det[0].dk == ref[0].dk) << "dK against the atomics' " << what;
    EXPECT_TRUE(det[0].dv == ref[0].dv) << "dV against the atomics' " << what;
    std::printf("%-48s dQ rel L2 vs atomics %.2e, scratch %.1f MiB\n", what.c_str(), rel,
                AttnDetScratchBytes(c.s, opt) / 1048576.0);
  }
}

TEST(DetCudaArgs, NeedsItsScratch) {
  const AttnShape s{1, 2, 256, 64, true};
  for (AttnKind kind : {AttnKind::kFpa, AttnKind::kSageBwd}) {
    AttnOptions opt;
    opt.kind = kind;
    opt.deterministic = true;
    EXPECT_GT(AttnDetScratchBytes(s, opt), 0u);
    // Valid-looking device pointers are never dereferenced: the checks come first.
    void* fake = reinterpret_cast<void*>(uintptr_t(1) << 20);
    auto* b = static_cast<__nv_bfloat16*>(fake);
    const Status none = AttnBackwardCuda(s, opt, b, b, b, b, static_cast<float*>(fake), b, b, b, b,
                                         fake, AttnWorkspaceBytes(s, opt) + 256, nullptr);
    EXPECT_FALSE(none.ok());
    EXPECT_NE(none.message().find("scratch"), std::string::npos) << none.ToString();
    const Status shorter = AttnBackwardCuda(s, opt, b, b, b, b, static_cast<float*>(fake), b, b, b,
                                            b, fake, AttnWorkspaceBytes(s, opt) + 256, nullptr,
                                            fake, AttnDetScratchBytes(s, opt) - 256);
    EXPECT_FALSE(shorter.ok());
    EXPECT_NE(shorter.message().find("scratch"), std::string::npos) << shorter.ToString();
    opt.deterministic = false;
    EXPECT_EQ(AttnDetScratchBytes(s, opt), 0u);
  }
}

// The emulator-only options (a partial int8_products mask, finer scale groups, ds_bf16 with
// Q-smoothing or the dQ correction) are refused by the GPU launchers before anything runs,
// naming the option.
TEST(DetCudaArgs, EmulatorOnlyOptionsAreRefused) {
  const AttnShape s{1, 2, 256, 64, true};
  void* fake = reinterpret_cast<void*>(uintptr_t(1) << 20);
  auto* b = static_cast<__nv_bfloat16*>(fake);
  auto* f = static_cast<float*>(fake);
  const size_t ws = SageWorkspaceBytes(s);
  AttnOptions bf16;
  bf16.ds_bf16 = true;
  bf16.smooth_q = true;
  AttnOptions bf16c;
  bf16c.ds_bf16 = true;
  bf16c.dq_kmean_correction = true;
  AttnOptions mask;
  mask.int8_products = kSageS;
  AttnOptions groups;
  groups.ds_row_keys = 16;
  for (const AttnOptions& opt : {bf16, bf16c, mask, groups}) {
    const Status fwd = SageForwardCuda(s, opt, b, b, b, b, f, fake, ws, nullptr);
    const Status bwd = SageBackwardCuda(s, opt, b, b, b, b, f, b, b, b, b, fake, ws, nullptr);
    for (const Status& st : {fwd, bwd}) {
      EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
      const char* what = opt.ds_bf16       ? "ds_bf16"
                         : opt.ds_row_keys ? "ds_row_keys"
                                           : "int8_products";
      EXPECT_NE(st.message().find(what), std::string::npos) << st.ToString();
    }
  }
}

}  // namespace
}  // namespace ablate::kernels
