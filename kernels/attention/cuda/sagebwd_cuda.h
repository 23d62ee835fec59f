// SageBwd INT8 attention on the GPU (sm_90): forward and backward, the CUDA twin of
// kernels::SageForward / kernels::SageBackward (attention/attention_cpu.h, kernels/ALGORITHMS.md §1.2).
//
// Tensors on device, all (B, H, N, D) row-major: q, k, v, o, do_, dq, dk, dv are __nv_bfloat16;
// lse is (B, H, N) float, natural-log sum-exp of the logits in the smoothed domain (the logits of
// Q^ K^ including the Q-smoothing bias), exactly as the CPU emulator's SageSaved::lse.
// D in {64, 128}; 1 <= N <= 65535 * 64; B*H <= 65535 (launch grid dimensions); causal or not
// (shape.causal).
//
// Tiles: kSageBq query rows x kSageBkv key rows for every head dim and both passes, K and V
// quantized in groups of SageKvGroup(opt, d) keys (128 at d128 without Q-smoothing, where the
// forward steps 128 keys at a time; else 64), the backward's dS^ row scales (for dQ) over
// SageBwdKeyBlock(opt, d) keys (128 with 128-key groups, else 64); configure the CPU emulator with
// SageCpuOptions(opt, d) to compare bit-for-bit up to accumulation order. (The forward kernel's
// CTA covers two kSageBq groups; the groups, their scales and means are unchanged.)
//
// Workspace: caller-provided, SageWorkspaceBytes(shape, opt) bytes, 256-byte aligned. The
// forward writes the quantized Q^, K^, V^ (and their transposes), their scales, the K mean and
// the per-Q-tile means into it; the backward reads them back, so the backward MUST get the same
// workspace (unchanged) that the forward of the same q, k, v, shape and options used. The rest of
// the workspace (dO^, D_i, the fp32 dQ accumulator) is scratch for the backward.
// Layout (BH = B*H, Np = N rounded up to 64, tq = Np/kSageBq, tk = Np/kSageBkv, each region
// 256-byte aligned, in this order):
//   qh, qht, kh, kht, vh, vht, doh, doht : int8 (BH, Np, D) / transposes (BH, D, Np)
//   sq (BH, tq) f32, sk (BH, tk), sv (BH, tk), sdo (BH, tq), kbar (BH, D), mu (BH, tq, D),
//   drow (BH, N) f32 = rowsum(dO o O), dsrow (BH, N) f32 = rowsum(dS), dqacc (BH, Np, D) f32 in
//   4 KB blocks of 16 rows x 64 columns (sagebwd.cu, DqAccIndex),
//   kpart (BH, 16, D) f64 = partial K sums over up to 16 row ranges (the K mean's first pass),
//   armed (one int): set by the forward kernel after it zeroed dsrow and dqacc, cleared by the
//   backward's dQ conversion (after the backward kernel added into them).
// Launches: forward = K-mean parts (smooth_k), one quantization launch for K and V (and Q with
// smooth_q or a pre-v6 lab forward), the attention kernel (which quantizes Q itself
// otherwise, writing qh, qht and sq as the quantization launch would, and zeroes dsrow / dqacc
// for the backward: a few us there, more off the memory-bound prep launch); backward = one
// launch quantizing dO with D_i (and zeroing dsrow / dqacc
// itself unless the forward armed them: a second backward after one forward stays correct),
// the attention kernel, the dQ conversion.
// dQ is accumulated in fp32 into dqacc (one CTA per K tile; atomicAdd, or one bulk reduction per
// warp and 16 x 64 block from shared memory), then converted to bf16 (plus the K-smoothing
// correction) by a final kernel; dK and dV are owned by one CTA each.
//
// Launchers are asynchronous on `stream` (no host synchronization); errors from the launch are
// converted to Status; errors from the kernels themselves surface at the caller's next sync.
// Thread safety: launchers are reentrant; concurrent calls must use distinct workspaces/outputs.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>

#include "ablate/status.h"
#include "attention/attention_cpu.h"

namespace ablate::kernels {

inline constexpr int kSageBq = 64;   // query rows per tile (fwd and bwd, D = 64 and 128)
inline constexpr int kSageBkv = 64;  // key rows per tile

struct SageCudaOptions {
  bool smooth_k = true;
  bool smooth_q = false;
  bool int8_dp = false;
  bool dq_kmean_correction = true;
  // Kernel lab only (kernels/bench/README.md, Variants): -1 runs the production backward; a
  // value >= 0 picks one of the compiled-in backward variants (sagebwd.cu, kBwd* bits; the
  // launcher returns InvalidArgument for one that is not compiled in).
  int bwd_variant = -1;
  // Kernel lab only: -1 runs the production forward; 8 = the mma.sync forward (its Q from the
  // quantize launch), 10 = the same by wgmma (v6), 11 = 10 with the grid in longest-first order
  // across heads, 12 = 10 warp-specialized (v7, production non-causal at d128 with 64-key groups),
  // 15 = 11 warp-specialized with S of the next K tile issued before the softmax (production
  // causal, 64-key groups), 16 = 12 stepping 128 keys (two K tiles) per iteration, for kv_group =
  // 128; 20 / 21 = 16 / its causal form with the K^ / V^T tiles copied by TMA (one thread,
  // mbarriers; 21: production causal at d128 below N = 4096); 22 = 20 with the consumers' S wgmmas
  // in ping-pong turns and the lazy rescale; 23 / 24 = 10 / 11 with the lazy rescale (production at
  // d64); 25 / 26 = 20 / 21 with three consumer warpgroups of 64 rows (192 rows per CTA), 27 / 28 =
  // 25 / 26 with the lazy rescale (production at d128: 27 non-causal, 28 causal from N = 4096;
  // sagebwd.cu, FwdCompiled); other values: InvalidArgument.
  int fwd_variant = -1;
  // K / V quantization group in keys (kernels/ALGORITHMS.md: tile sizes are parameters; the CPU
  // emulator's SageOptions::kv_group): kSageBkv, or 2 * kSageBkv with the forward variants that
  // step 128 keys at a time (16 / 20 / 21 / 22, no Q-smoothing); 0 = SageKvGroup's choice;
  // anything else: InvalidArgument. The backward must get the forward's value.
  int kv_group = 0;
  // Causal grids run longest-first in groups of this many heads (attention_common.cuh,
  // LptBlock): 0 = production's choice (LptHeadsAuto: 16 heads, more where the last group would
  // carry too little work), n > 0 = n heads (n >= B * H: one group, longest-first across all
  // heads, the order earlier); negative: InvalidArgument. Any value computes the same
  // outputs (dQ up to the order of its fp32 accumulation).
  int lpt_heads = 0;
};

// Whether the lab forward variant v (SageCudaOptions::fwd_variant >= 0) steps 128 keys at a time,
// over 128-key K / V groups (sagebwd v9: 16, 20 / 21 with TMA stages, 22 = 20 with the ping-pong
// issue and the lazy rescale, 25-28 with three consumer warpgroups).
constexpr bool SageFwdVariantSteps128(int v) {
  return v == 16 || (v >= 20 && v <= 22) || (v >= 25 && v <= 28);
}

// The K / V quantization group that `opt` runs at head dim d: kv_group when set, else 128 keys
// where the forward that steps 128 keys runs (d128 without Q-smoothing, production or a variant
// of SageFwdVariantSteps128), else 64.
inline int SageKvGroup(const SageCudaOptions& opt, int d) {
  if (opt.kv_group != 0) return opt.kv_group;
  const int v = opt.fwd_variant;
  const bool k128 = d == 128 && !opt.smooth_q && (v < 0 || SageFwdVariantSteps128(v));
  return k128 ? 2 * kSageBkv : kSageBkv;
}

// The backward variant bit (sagebwd.cu, kBwdDqPair) whose two consumers share dQ over 128 keys.
inline constexpr int kSageBwdDqPair = 1048576;
// The backward variant bit (sagebwd.cu, kBwdTma) that copies each Q tile's operands by TMA.
inline constexpr int kSageBwdTma = 2097152;
// The backward variant bit (sagebwd.cu, kBwdEarlyP1; with kSageBwdDqPair and kSageBwdTma) that
// issues the next Q tile's S and dP products during this tile's last epilogues.
inline constexpr int kSageBwdEarlyP1 = 4194304;
// The backward variant bit (sagebwd.cu, kBwdSwap; with kSageBwdEarlyP1) that computes S^T and
// dP^T (keys as rows), so that the P^T / dS^T scales are row statistics (production causal at
// d128 with 128-key K / V groups).
inline constexpr int kSageBwdSwap = 8388608;

// The backward's key block (the emulator's bkv) for `opt` at head dim d: 128 where the backward
// quantizes dS^ for dQ with one scale per query row over 128 keys (production at d128 with
// 128-key K / V groups, or a kSageBwdDqPair lab variant), else 64.
inline int SageBwdKeyBlock(const SageCudaOptions& opt, int d) {
  const bool pair = d == 128 && SageKvGroup(opt, d) == 2 * kSageBkv &&
                    (opt.bwd_variant < 0 || (opt.bwd_variant & kSageBwdDqPair) != 0);
  return pair ? 2 * kSageBkv : kSageBkv;
}

// The CPU emulator options that the kernels implement for `opt` at head dim d.
inline SageOptions SageCpuOptions(const SageCudaOptions& opt, int d) {
  SageOptions o;
  o.bq = kSageBq;
  o.bkv = SageBwdKeyBlock(opt, d);
  o.smooth_k = opt.smooth_k;
  o.smooth_q = opt.smooth_q;
  o.int8_dp = opt.int8_dp;
  o.dq_kmean_correction = opt.dq_kmean_correction;
  o.kv_group = SageKvGroup(opt, d);
  return o;
}

size_t SageWorkspaceBytes(const AttnShape& shape, const SageCudaOptions& opt);

// The K mean's first pass (K-smoothing): partial sums over `parts` row ranges of each head,
// part p = rows [p rows_per_part, min(N, (p + 1) rows_per_part)). The forward sums K itself in
// this layout, or takes the sums from its caller (SageForwardCuda's k_parts), e.g. from the pass
// that produced K (the trainer's QK-norm / RoPE kernel: layers QkvNormRopeForwardCuda's k_sums).
struct SageKMeanPartsLayout {
  int parts;
  int rows_per_part;
};
SageKMeanPartsLayout SageKMeanParts(int n);

#ifdef ABLATE_SAGE_TRACE
// Lab timeline (builds with ABLATE_SAGE_TRACE only): buf = 2 x 65536 x 8 uint64 on the device
// (nullptr: off); the warp-specialized forward / backward write %globaltimer at fixed points.
Status SageTraceSet(void* buf);
#endif
// k_parts (optional, read only with opt.smooth_k): (B*H, SageKMeanParts(N).parts, D) doubles,
// the sums of k's rows (bf16 values, exactly as stored) over each part, written on `stream` (or
// synchronized with it) before this call; the forward then skips its own K-mean pass. Sums equal
// to the forward's own (fp64 sums of bf16 values are exact unless a head's values span more than
// ~2^35 in magnitude) give bit-identical outputs.
Status SageForwardCuda(const AttnShape& shape, const SageCudaOptions& opt, const __nv_bfloat16* q,
                       const __nv_bfloat16* k, const __nv_bfloat16* v, __nv_bfloat16* o,
                       float* lse, void* workspace, size_t workspace_bytes, cudaStream_t stream,
                       const double* k_parts = nullptr);

Status SageBackwardCuda(const AttnShape& shape, const SageCudaOptions& opt,
                        const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                        const __nv_bfloat16* o, const __nv_bfloat16* do_, const float* lse,
                        __nv_bfloat16* dq, __nv_bfloat16* dk, __nv_bfloat16* dv, void* workspace,
                        size_t workspace_bytes, cudaStream_t stream);

}  // namespace ablate::kernels
