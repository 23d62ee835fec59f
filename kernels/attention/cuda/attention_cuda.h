// Attention on the GPU (sm_90a): FPA (exact bf16 flash attention) and SageBwd (INT8), forward and
// backward, the CUDA twins of FpaForward / FpaBackward and SageForward / SageBackward in
// attention/attention_cpu.h (kernels/ALGORITHMS.md §1.1, §1.2). One shape (AttnShape) and one
// options type (AttnOptions, attention/attention.h) for both; AttnForwardCuda / AttnBackwardCuda
// run the kind that opt.kind names.
//
// Layout: q, k, v, o, do_, dq, dk, dv: (B, H, N, D) __nv_bfloat16 row-major contiguous; lse:
// (B, H, N) float, natural-log sum-exp of the logit rows (FPA: of S = tau Q K^T, tau = 1/sqrt(D);
// SageBwd: in the smoothed domain, the logits of Q^ K^ including the Q-smoothing bias, exactly as
// the CPU emulator's SageSaved::lse). D in {64, 128}; 1 <= N <= 65535 * 64; B*H <= 65535 (launch
// grid dimensions); causal or not (shape.causal).
//
// FPA numerics: all seven matmuls are bf16 MMAs with fp32 accumulation; softmax, LSE, D =
// rowsum(dO o O), dS and all accumulators are fp32; P and dS are rounded to bf16 only as MMA
// operands. dQ is accumulated in an fp32 workspace with atomics (its summation order, and its last
// bits, vary from run to run), then scaled and rounded to bf16; dK, dV, O and lse are
// deterministic. FPA has no options; the forward needs no workspace (it may be null).
//
// Deterministic backward (opt.deterministic; FpaBackwardCuda: a det_scratch given), both kinds:
// each key block's CTA adds its part of dQ (and SageBwd's rowsum(dS)) into a slice of its own in
// a separate scratch (AttnDetScratchBytes: one fp32 (B, H, N, D) slice per CTA, i.e. per 128 keys,
// or 64 for SageBwd at d64; shared by every layer, as it only lives within one backward call), at
// most two adders per element onto zero, and the conversion sums a row's slices in key order. The
// outputs are then the same bits on every run, the sums' order (not their precision) changed.
//
// SageBwd tiles: kSageBq query rows x kSageBkv key rows for every head dim and both passes, K and
// V quantized in groups of SageKvGroup(opt, d) keys (128 at d128 without Q-smoothing, where the
// forward steps 128 keys at a time; else 64), the backward's dS^ row scales (for dQ) over
// SageBwdKeyBlock(opt, d) keys (128 with 128-key groups, else 64). The GPU runs these tiles
// whatever opt.bq / bkv / kv_group say (those configure the CPU emulator); SageGpuTiles(opt, d)
// is the emulator configuration that matches the kernels bit-for-bit up to accumulation order.
// Only smooth_k, smooth_q, int8_dp, dq_kmean_correction, deterministic and ds_bf16 select GPU code
// (ds_bf16: the INT8 backward, then dQ and dK again by a bf16 mma.sync kernel on the codes, with
// bf16 dS products; not with smooth_q or dq_kmean_correction).
//
// SageBwd workspace: caller-provided, SageWorkspaceBytes(shape) bytes, 256-byte aligned. The
// forward writes the quantized Q^, K^, V^ (and their transposes), their scales, the K mean and the
// per-Q-tile means into it; the backward reads them back, so the backward MUST get the same
// workspace (unchanged) that the forward of the same q, k, v, shape and options used. The rest
// (dO^, D_i, the fp32 dQ accumulator) is scratch for the backward. Layout (BH = B*H, Np = N rounded
// up to 64, tq = Np/kSageBq, tk = Np/kSageBkv, each region 256-byte aligned, in this order):
//   qh, qht, kh, kht, vh, vht, doh, doht : int8 (BH, Np, D) / transposes (BH, D, Np)
//   sq (BH, tq) f32, sk (BH, tk), sv (BH, tk), sdo (BH, tq), kbar (BH, D), mu (BH, tq, D),
//   drow (BH, N) f32 = rowsum(dO o O), dsrow (BH, N) f32 = rowsum(dS), dqacc (BH, Np, D) f32 in
//   4 KB blocks of 16 rows x 64 columns (sage_common.cuh, DqAccIndex),
//   kpart (BH, 16, D) f64 = partial K sums over up to 16 row ranges (the K mean's first pass),
//   armed (one int): set by the forward kernel after it zeroed dsrow and dqacc, cleared by the
//   backward's dQ conversion (after the backward kernel added into them).
// SageBwd launches: forward = K-mean parts (smooth_k), one quantization launch for K and V (and Q
// with smooth_q), the attention kernel (which quantizes Q itself otherwise, writing qh, qht and sq
// as the quantization launch would, and zeroes dsrow / dqacc for the backward); backward = one
// launch quantizing dO with D_i (and zeroing dsrow / dqacc itself unless the forward armed them:
// a second backward after one forward stays correct), the attention kernel, the dQ conversion.
// dQ is accumulated in fp32 into dqacc by the K tiles' CTAs, then converted to bf16 (plus the
// K-smoothing correction) by a final kernel; dK and dV are owned by one CTA each.
//
// Contract of every launcher: it validates its arguments (InvalidArgument: unsupported shape,
// null or misaligned tensor, short workspace), enqueues its kernels on `stream` and returns
// without host synchronization; launch errors come back as Internal, errors of the kernels
// themselves surface at the caller's next synchronization. Device buffers must not alias each
// other. Thread safety: launchers are reentrant; concurrent calls must use distinct workspaces and
// outputs.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>

#include "ablate/status.h"
#include "attention/attention.h"

namespace ablate::kernels {

// Workspace bytes: FPA's backward (the fp32 dQ accumulator, B*H*N*D, and D = rowsum(dO o O),
// B*H*N, each rounded up to 256 bytes; its forward needs 0), SageBwd's forward and backward (the
// layout above); AttnWorkspaceBytes for opt.kind. 0 for an empty shape.
size_t FpaWorkspaceBytes(const AttnShape& shape);
size_t SageWorkspaceBytes(const AttnShape& shape);
size_t AttnWorkspaceBytes(const AttnShape& shape, const AttnOptions& opt);
// The deterministic backward's scratch (256-byte aligned); AttnDetScratchBytes is 0 unless
// opt.deterministic.
size_t FpaDetScratchBytes(const AttnShape& shape);
size_t SageDetScratchBytes(const AttnShape& shape, const AttnOptions& opt);
size_t AttnDetScratchBytes(const AttnShape& shape, const AttnOptions& opt);

// The SageBwd K mean's first pass (K-smoothing): partial sums over `parts` row ranges of each
// head, part p = rows [p rows_per_part, min(N, (p + 1) rows_per_part)). The forward sums K itself
// in this layout, or takes the sums from its caller (k_parts below), e.g. from the pass that
// produced K (the trainer's QK-norm / RoPE kernel: layers QkvNormRopeForwardCuda's k_sums).
struct SageKMeanPartsLayout {
  int parts;
  int rows_per_part;
};
SageKMeanPartsLayout SageKMeanParts(int n);

// o: out; lse: out (every element of both written). FPA ignores workspace and k_parts.
// k_parts (optional, SageBwd with opt.smooth_k only): (B*H, SageKMeanParts(N).parts, D) doubles,
// the sums of k's rows (bf16 values, exactly as stored) over each part, written on `stream` (or
// synchronized with it) before this call; the forward then skips its own K-mean pass. Sums equal
// to the forward's own (fp64 sums of bf16 values are exact unless a head's values span more than
// ~2^35 in magnitude) give bit-identical outputs.
Status AttnForwardCuda(const AttnShape& shape, const AttnOptions& opt, const __nv_bfloat16* q,
                       const __nv_bfloat16* k, const __nv_bfloat16* v, __nv_bfloat16* o,
                       float* lse, void* workspace, size_t workspace_bytes, cudaStream_t stream,
                       const double* k_parts = nullptr);
// o and lse from AttnForwardCuda on the same q, k, v and options (SageBwd: and workspace);
// do_: dL/dO. dq, dk, dv: out, overwritten (every element written). det_scratch:
// AttnDetScratchBytes(shape, opt) bytes with opt.deterministic (InvalidArgument without), else
// unused.
Status AttnBackwardCuda(const AttnShape& shape, const AttnOptions& opt, const __nv_bfloat16* q,
                        const __nv_bfloat16* k, const __nv_bfloat16* v, const __nv_bfloat16* o,
                        const float* lse, const __nv_bfloat16* do_, __nv_bfloat16* dq,
                        __nv_bfloat16* dk, __nv_bfloat16* dv, void* workspace,
                        size_t workspace_bytes, cudaStream_t stream, void* det_scratch = nullptr,
                        size_t det_scratch_bytes = 0);

// The two kinds' launchers (what AttnForwardCuda / AttnBackwardCuda call).
Status FpaForwardCuda(const AttnShape& shape, const __nv_bfloat16* q, const __nv_bfloat16* k,
                      const __nv_bfloat16* v, __nv_bfloat16* o, float* lse, cudaStream_t stream);
Status FpaBackwardCuda(const AttnShape& shape, const __nv_bfloat16* q, const __nv_bfloat16* k,
                       const __nv_bfloat16* v, const __nv_bfloat16* o, const float* lse,
                       const __nv_bfloat16* do_, __nv_bfloat16* dq, __nv_bfloat16* dk,
                       __nv_bfloat16* dv, void* workspace, size_t workspace_bytes,
                       cudaStream_t stream, void* det_scratch = nullptr,
                       size_t det_scratch_bytes = 0);
Status SageForwardCuda(const AttnShape& shape, const AttnOptions& opt, const __nv_bfloat16* q,
                       const __nv_bfloat16* k, const __nv_bfloat16* v, __nv_bfloat16* o,
                       float* lse, void* workspace, size_t workspace_bytes, cudaStream_t stream,
                       const double* k_parts = nullptr);
Status SageBackwardCuda(const AttnShape& shape, const AttnOptions& opt, const __nv_bfloat16* q,
                        const __nv_bfloat16* k, const __nv_bfloat16* v, const __nv_bfloat16* o,
                        const float* lse, const __nv_bfloat16* do_, __nv_bfloat16* dq,
                        __nv_bfloat16* dk, __nv_bfloat16* dv, void* workspace,
                        size_t workspace_bytes, cudaStream_t stream, void* det_scratch = nullptr,
                        size_t det_scratch_bytes = 0);

}  // namespace ablate::kernels
