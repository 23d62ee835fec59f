// FPA on the GPU: the backward and its launcher; the host API is attention_cuda.h, the numerics
// kernels/ALGORITHMS.md §1.1. (1) preprocess: D = rowsum(dO o O) fp32, zero the fp32 dQ
// accumulator; (2) main: FPA's backward, the warp-specialized wgmma kernel of
// fpa_backward_ws.cuh (FlashAttention-3 structure, head dim 64 and 128); (3) postprocess: dq =
// bf16(tau * dQ_acc). Queries past N get lse = +inf (P = 0) and are never stored.
// Deterministic (a det scratch given): each 128-key CTA adds into its own slice of the scratch
// (one adder per element onto zero), the preprocess zeroes the slices a row will receive and the
// postprocess sums them in key order.
// SageBwd's dQ and dK with bf16 dS products (AttnOptions::ds_bf16; SageDsBf16BackwardCuda below,
// fpa_common.cuh) run between the same preprocess and postprocess, with DsBf16BackwardKernel of
// ds_bf16_backward.cuh as (2): a FlashAttention-2 kernel on mma.sync m16n8k16 over SageBwd's
// INT8 codes.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "attention/cuda/fpa_common.cuh"

namespace ablate::kernels::fpa {
namespace {

struct BwdParams {
  const bf16* q;
  const bf16* k;
  const bf16* v;
  const bf16* do_;
  const float* lse;
  const float* dvec;  // (B, H, N) rowsum(dO o O)
  float* dq_acc;      // (B, H, N, D) fp32, zeroed by FpaBwdPreprocessKernel; unscaled sum of dS K
  bf16* dk;
  bf16* dv;
  int N;
  float scale_log2;
  float tau;
  int lpt_heads;  // causal: heads per longest-first group (LptBlock)
  // Deterministic: B*H, and dq_acc is the scratch of ceil(N / 128) slices (B, H, N, D), K tile
  // jb's CTA adding into slice jb; 0: dq_acc is the one shared accumulator.
  int det_heads;
  // SageDsBf16BackwardCuda (DsBf16BackwardKernel; FPA leaves these null / 0): S = tau sq sk Q^ K^T
  // from SageBwd's INT8 codes (bf16 holds them exactly; with fp32 accumulation their products are
  // exact integers below 2^24) with the scales of its kernels (sq per Q tile, sk per K group of 64
  // << kv_shift keys), bit for bit their softmax scale (SoftmaxScale); dP = sdo sv dO^ V^T from the
  // codes with int8_dp, else from bf16 dO, V as FPA's; k is the bf16 K (minus kbar when kbar is
  // given: the smoothed operand of dQ); no dV.
  const int8_t *qh, *kh, *vh, *doh;  // (BH, np, D)
  const float *sq, *sk, *sv, *sdo;   // (BH, np / 64)
  const float* kbar;                 // (BH, D) or null
  int np, kv_shift;
  bool int8_dp;
};

// Slices of the deterministic scratch that row n of a head receives: K tiles 0..n/128 (causal),
// else all.
__host__ __device__ __forceinline__ int DetSlicesOfRow(int n, int slices, bool causal) {
  return causal ? min(slices, n / 128 + 1) : slices;
}

// Dv[row] = sum_d dO[row][d] * O[row][d] (fp32), one warp per row; zeroes the row of the fp32
// dQ accumulator.
// Deterministic (slices > 0): zeroes the row in each slice that it receives (DetSlicesOfRow).
template <int D>
__global__ void __launch_bounds__(256) FpaBwdPreprocessKernel(const bf16* o, const bf16* do_,
                                                              float* dvec, float* dq_acc,
                                                              int64_t rows, int n, int slices,
                                                              bool causal) {
  GridDepLaunchDependents();  // the main kernel (pdl) waits for this grid's completion
  const int64_t row = int64_t(blockIdx.x) * 8 + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  constexpr int kPer = D / 32;  // 2 or 4 elements per lane
  const int ns = slices > 0 ? DetSlicesOfRow(int(row % n), slices, causal) : 1;
  for (int sl = 0; sl < ns; ++sl) {
    float* zrow = dq_acc + (int64_t(sl) * rows + row) * D + lane * kPer;
    if constexpr (kPer == 4) {
      *reinterpret_cast<float4*>(zrow) = make_float4(0.f, 0.f, 0.f, 0.f);
    } else {
      *reinterpret_cast<float2*>(zrow) = make_float2(0.f, 0.f);
    }
  }
  const bf16* orow = o + row * D + lane * kPer;
  const bf16* drow = do_ + row * D + lane * kPer;
  float acc = 0.f;
#pragma unroll
  for (int i = 0; i < kPer; i += 2) {
    const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(orow + i));
    const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(drow + i));
    acc = fmaf(a.x, b.x, fmaf(a.y, b.y, acc));
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (lane == 0) dvec[row] = acc;
}

// dq[i] = bf16(tau * dq_acc[i]), 4 elements per thread; deterministic (slices > 0): of the sum of
// the row's slices in K-tile order.
template <int D>
__global__ void __launch_bounds__(256) FpaBwdPostprocessKernel(const float* dq_acc, bf16* dq,
                                                               int64_t n4, float tau, int n,
                                                               int slices, bool causal) {
  GridDepWait();  // dq_acc: the main kernel (pdl)
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n4) return;
  const float4* acc = reinterpret_cast<const float4*>(dq_acc);
  float4 a = acc[i];
  if (slices > 0) {
    const int ns = DetSlicesOfRow(int((i / (D / 4)) % n), slices, causal);
    for (int sl = 1; sl < ns; ++sl) {
      const float4 b = acc[int64_t(sl) * n4 + i];
      a.x += b.x;
      a.y += b.y;
      a.z += b.z;
      a.w += b.w;
    }
  }
  uint2 out;
  out.x = PackBf16x2(a.x * tau, a.y * tau);
  out.y = PackBf16x2(a.z * tau, a.w * tau);
  reinterpret_cast<uint2*>(dq)[i] = out;
}

// Keys per CTA of both backward kernels (the deterministic scratch has one slice per CTA column).
constexpr int kBwdKeys = 128;

}  // namespace
}  // namespace ablate::kernels::fpa

#include "attention/cuda/ds_bf16_backward.cuh"
#include "attention/cuda/fpa_backward_ws.cuh"

namespace ablate::kernels::fpa {
namespace {

// kSage: SageBwd's bf16-dS products (DsBf16BackwardKernel), else FPA's (FpaBackwardWsKernel).
template <int D, bool kCausal, bool kSage = false>
Status LaunchBackward(const AttnShape& s, BwdParams p, const bf16* o, bf16* dq,
                      cudaStream_t stream) {
  const int64_t rows = s.rows();
  const int slices = p.det_heads > 0 ? CeilDiv(s.N, kBwdKeys) : 0;
  FpaBwdPreprocessKernel<D><<<unsigned((rows + 7) / 8), 256, 0, stream>>>(
      o, p.do_, const_cast<float*>(p.dvec), p.dq_acc, rows, s.N, slices, kCausal);
  ABLATE_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "FpaBackwardCuda: preprocess launch");
  // The main and postprocess launches are programmatic dependents of the one before each. The
  // main kernel: one CTA per kBwdKeys keys, longest-first across heads when causal; `lpt` is
  // the params' lpt_heads, which LptGrid fills.
  const auto launch_main = [&](auto kernel, int threads, int smem, const auto& params,
                               int* lpt) -> Status {
    ABLATE_CUDA_RETURN_IF_ERROR(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
        "FpaBackwardCuda: cudaFuncSetAttribute");
    ABLATE_ASSIGN_OR_RETURN(const dim3 grid, LptGrid(kCausal, s.B * s.H, CeilDiv(s.N, kBwdKeys),
                                                     kernel, threads, smem, lpt));
    return CudaStatus(LaunchKernel(kernel, grid, dim3(threads), smem, stream, /*pdl=*/true, params),
                      "FpaBackwardCuda: main launch");
  };
  if constexpr (!kSage) {
    // FPA: the warp-specialized wgmma kernel (fpa_backward_ws.cuh).
    using L = WsBwdLayout<D>;
    WsBwdParams wp{};
    wp.b = p;
    const uint64_t n = s.N, bh = uint64_t(s.B) * s.H;
    ABLATE_RETURN_IF_ERROR((wgmma::GmmaTileTensorMap<typename L::Tile, 2>(&wp.tm_q, p.q, D, n, bh,
                                                                          2 * D, 2 * n * D, "Q")));
    ABLATE_RETURN_IF_ERROR((wgmma::GmmaTileTensorMap<typename L::Tile, 2>(
        &wp.tm_do, p.do_, D, n, bh, 2 * D, 2 * n * D, "dO")));
    ABLATE_RETURN_IF_ERROR(
        launch_main(FpaBackwardWsKernel<D, kCausal>, L::kThreads, L::kBytes, wp, &wp.b.lpt_heads));
  } else {
    using Cfg = DsBf16Config<D>;
    ABLATE_RETURN_IF_ERROR(
        launch_main(DsBf16BackwardKernel<D, kCausal>, Cfg::kThreads, Cfg::kSmem, p, &p.lpt_heads));
  }
  const int64_t n4 = s.numel() / 4;  // D is a multiple of 4
  return CudaStatus(LaunchKernel(FpaBwdPostprocessKernel<D>, dim3(unsigned((n4 + 255) / 256)),
                                 dim3(256), 0, stream, /*pdl=*/true, p.dq_acc, dq, n4, p.tau,
                                 s.N, slices, kCausal),
                    "FpaBackwardCuda: postprocess launch");
}

constexpr size_t kAlign = 256;

// FPA's parameters (the SageBwd fields null / 0).
BwdParams FpaParams(const AttnShape& s, const bf16* q, const bf16* k, const bf16* v,
                    const bf16* do_, const float* lse, float* dvec, float* dq_acc, bf16* dk,
                    bf16* dv, int det_heads) {
  BwdParams p{};
  p.q = q;
  p.k = k;
  p.v = v;
  p.do_ = do_;
  p.lse = lse;
  p.dvec = dvec;
  p.dq_acc = dq_acc;
  p.dk = dk;
  p.dv = dv;
  p.N = s.N;
  p.tau = 1.f / std::sqrt(float(s.D));
  p.scale_log2 = p.tau * kLog2e;
  p.det_heads = det_heads;
  return p;
}

}  // namespace
}  // namespace ablate::kernels::fpa

namespace ablate::kernels {

using bf16 = __nv_bfloat16;

size_t FpaWorkspaceBytes(const AttnShape& s) {
  if (s.B < 1 || s.H < 1 || s.N < 1 || s.D < 1) return 0;
  return size_t(cuda::RoundUp(s.numel() * int64_t(sizeof(float)), fpa::kAlign)) +
         size_t(cuda::RoundUp(s.rows() * int64_t(sizeof(float)), fpa::kAlign));
}

size_t FpaDetScratchBytes(const AttnShape& s) {
  if (s.B < 1 || s.H < 1 || s.N < 1 || s.D < 1) return 0;
  return size_t(cuda::RoundUp(int64_t(cuda::CeilDiv(s.N, 128)) * s.numel() *
                                  int64_t(sizeof(float)),
                              fpa::kAlign));
}

Status FpaBackwardCuda(const AttnShape& s, const bf16* q, const bf16* k, const bf16* v,
                       const bf16* o, const float* lse, const bf16* do_, bf16* dq, bf16* dk,
                       bf16* dv, void* workspace, size_t ws_bytes, cudaStream_t stream,
                       void* det_scratch, size_t det_scratch_bytes) {
  using namespace fpa;
  constexpr const char* kWho = "FpaBackwardCuda";
  ABLATE_RETURN_IF_ERROR(CheckShared(s, q, k, v, o, kWho));
  ABLATE_RETURN_IF_ERROR(CheckPtr(do_, "do", kWho));
  ABLATE_RETURN_IF_ERROR(CheckPtr(dq, "dq", kWho));
  ABLATE_RETURN_IF_ERROR(CheckPtr(dk, "dk", kWho));
  ABLATE_RETURN_IF_ERROR(CheckPtr(dv, "dv", kWho));
  ABLATE_RETURN_IF_ERROR(CheckPtr(workspace, "workspace", kWho));
  if (lse == nullptr) return InvalidArgument("FpaBackwardCuda: lse is null");
  const size_t need = FpaWorkspaceBytes(s);
  if (ws_bytes < need) {
    return InvalidArgument("FpaBackwardCuda: workspace has " + std::to_string(ws_bytes) +
                           " bytes, needs " + std::to_string(need) + " (FpaWorkspaceBytes)");
  }
  if (det_scratch != nullptr && det_scratch_bytes < FpaDetScratchBytes(s)) {
    return InvalidArgument("FpaBackwardCuda: deterministic scratch has " +
                           std::to_string(det_scratch_bytes) + " bytes, needs " +
                           std::to_string(FpaDetScratchBytes(s)) + " (FpaDetScratchBytes)");
  }
  if (reinterpret_cast<uintptr_t>(det_scratch) % 16 != 0) {
    return InvalidArgument("FpaBackwardCuda: deterministic scratch not 16-byte aligned");
  }
  float* dq_acc = det_scratch ? static_cast<float*>(det_scratch) : static_cast<float*>(workspace);
  float* dvec = reinterpret_cast<float*>(static_cast<char*>(workspace) +
                                         cuda::RoundUp(s.numel() * int64_t(sizeof(float)), fpa::kAlign));
  const BwdParams p =
      FpaParams(s, q, k, v, do_, lse, dvec, dq_acc, dk, dv, det_scratch ? s.B * s.H : 0);
  if (s.D == 64) {
    return s.causal ? LaunchBackward<64, true>(s, p, o, dq, stream)
                    : LaunchBackward<64, false>(s, p, o, dq, stream);
  }
  return s.causal ? LaunchBackward<128, true>(s, p, o, dq, stream)
                  : LaunchBackward<128, false>(s, p, o, dq, stream);
}

namespace fpa {

Status SageDsBf16BackwardCuda(const AttnShape& s, const SageDsBf16Args& a, const bf16* q,
                              const bf16* k, const bf16* v, const bf16* o, const float* lse,
                              const bf16* do_, bf16* dq, bf16* dk, cudaStream_t stream) {
  BwdParams p = FpaParams(s, q, k, v, do_, lse, a.drow, a.dq_acc, dk, /*dv=*/nullptr,
                          a.deterministic ? s.B * s.H : 0);
  p.qh = a.qh;
  p.kh = a.kh;
  p.vh = a.vh;
  p.doh = a.doh;
  p.sq = a.sq;
  p.sk = a.sk;
  p.sv = a.sv;
  p.sdo = a.sdo;
  p.kbar = a.kbar;
  p.np = a.np;
  p.kv_shift = a.kv_shift;
  p.int8_dp = a.int8_dp;
  if (s.D == 64) {
    return s.causal ? LaunchBackward<64, true, true>(s, p, o, dq, stream)
                    : LaunchBackward<64, false, true>(s, p, o, dq, stream);
  }
  return s.causal ? LaunchBackward<128, true, true>(s, p, o, dq, stream)
                  : LaunchBackward<128, false, true>(s, p, o, dq, stream);
}

}  // namespace fpa

}  // namespace ablate::kernels
