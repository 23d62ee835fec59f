// FPA (exact bf16 flash attention) on the GPU, forward and backward: the CUDA twin of
// FpaForward / FpaBackward in attention/attention_cpu.h (kernels/ALGORITHMS.md §1.1).
//
// Layout: q, k, v, o, do, dq, dk, dv: (B, H, N, D) __nv_bfloat16 row-major contiguous;
// lse: (B, H, N) float, natural-log sum-exp of the rows of S = tau Q K^T, tau = 1/sqrt(D).
// Causal (shape.causal) hides keys j > i. D in {64, 128}; 1 <= N <= 65535 * 64; B*H <= 65535
// (launch grid dimensions).
//
// Numerics: all seven matmuls are bf16 mma.sync m16n8k16 with fp32 accumulation; softmax, LSE,
// D = rowsum(dO o O), dS and all accumulators are fp32; P and dS are rounded to bf16 only as MMA
// operands. dQ is accumulated in an fp32 workspace with (float2) atomicAdd (so its summation
// order, and its last bits, vary from run to run), then scaled and rounded to bf16; dK and dV are
// computed without atomics and are deterministic. O, lse and the forward are deterministic.
//
// Contract: every launcher validates its arguments (InvalidArgument), enqueues its kernels on
// `stream` and returns without host synchronization; launch errors come back as Internal. The
// caller owns every buffer; `workspace` (ws_bytes >= FpaWorkspaceBytes(shape), 256-byte aligned
// as cudaMalloc gives) is used only while the enqueued work runs; the forward needs none (may be
// null). Device buffers must not alias each other. Thread safety: launchers are reentrant; two
// launches sharing a workspace must be ordered on one stream.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>

#include "ablate/status.h"
#include "attention/attention_cpu.h"

namespace ablate::kernels::cuda {

using bf16 = __nv_bfloat16;
using AttnShapeCuda = ::ablate::kernels::AttnShape;

// Kernel lab options (the defaults are production's).
struct FpaCudaOptions {
  // Causal grids run longest-first in groups of this many heads (attention_common.cuh, LptBlock):
  // 0 = production's choice (LptHeadsAuto: 16 heads, more where the last group would carry too
  // little work), n > 0 = n heads (1: head by head, the order earlier); negative:
  // InvalidArgument. Any value computes the same outputs (dQ up to the order of its fp32
  // accumulation).
  int lpt_heads = 0;
};

// Workspace bytes FpaBackwardCuda needs for `shape`: fp32 dQ accumulator (B*H*N*D) and the fp32
// D = rowsum(dO o O) vector (B*H*N), each rounded up to 256 bytes. The forward needs 0.
size_t FpaWorkspaceBytes(const AttnShapeCuda& shape);

// o: (B, H, N, D) out; lse: (B, H, N) out (natural log). Every element of o and lse is written.
Status FpaForwardCuda(const AttnShapeCuda& shape, const bf16* q, const bf16* k, const bf16* v,
                      bf16* o, float* lse, void* workspace, size_t ws_bytes, cudaStream_t stream,
                      const FpaCudaOptions& opt = {});

// o and lse from FpaForwardCuda on the same q, k, v; do_: dL/dO. dq, dk, dv: out, overwritten
// (every element written).
Status FpaBackwardCuda(const AttnShapeCuda& shape, const bf16* q, const bf16* k, const bf16* v,
                       const bf16* o, const float* lse, const bf16* do_, bf16* dq, bf16* dk,
                       bf16* dv, void* workspace, size_t ws_bytes, cudaStream_t stream,
                       const FpaCudaOptions& opt = {});

}  // namespace ablate::kernels::cuda
