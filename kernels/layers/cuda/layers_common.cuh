// Internals of the device layers, shared by their files (encoder_cuda.cu, rmsnorm_cuda.cu,
// rmsnorm_fused_cuda.cu, qkv_norm_rope_cuda.cu, rope_cuda.cu, elementwise_cuda.cu, loss_cuda.cu,
// heads_cuda.cu, diagnostics_cuda.cu): the storage conversions (ToF / FromF: compute is fp32
// whatever the storage), the launchers' size check, launch-error Status and grid size, the warp
// sum, the 16-byte alignment test, the fused kernels' block shape, and the instantiation list of
// the two-type templates. Not part of the interface (layers_cuda.h is): include only from
// kernels/layers/cuda/*.cu, after every other include (it defines TWO_TYPES).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "ablate/cuda_status.h"
#include "layers/cuda/layers_cuda.h"

namespace ablate::kernels::cuda {
namespace layers_internal {

constexpr float kEps = 1e-6f;  // kernels::kRmsNormEps

__device__ __forceinline__ float ToF(float x) { return x; }
__device__ __forceinline__ float ToF(bf16 x) { return __bfloat162float(x); }
template <typename T>
__device__ __forceinline__ T FromF(float x);
template <>
__device__ __forceinline__ float FromF<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ bf16 FromF<bf16>(float x) {
  return __float2bfloat16_rn(x);
}

inline Status Launched(const char* what) {
  return CudaStatus(cudaGetLastError(), std::string(what) + ": launch failed");
}

inline Status CheckSizes(const char* what, int64_t n, int64_t c = 1) {
  if (n < 0 || c <= 0) {
    return InvalidArgument(std::string(what) + ": sizes must be positive (got " + std::to_string(n) +
                           ", " + std::to_string(c) + ")");
  }
  return Status::Ok();
}

inline unsigned Blocks(int64_t n, int threads) {
  int64_t b = (n + threads - 1) / threads;
  return unsigned(std::max<int64_t>(1, std::min<int64_t>(b, 1 << 30)));
}

__device__ __forceinline__ float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

inline bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// The fused kernels' block (rmsnorm_fused_cuda.cu, qkv_norm_rope_cuda.cu).
constexpr int kFusedThreads = 256;  // 8 warps
constexpr int kFusedWarps = kFusedThreads / 32;

// Blocks for a warp-per-row kernel whose per-block partials are reduced afterwards: enough to fill
// the GPU, few enough that the partials stay small.
inline int FusedBlocks(int64_t rows) {
  return int(std::max<int64_t>(
      1, std::min<int64_t>(512, (rows + 2 * kFusedWarps - 1) / (2 * kFusedWarps))));
}

// out[c] += sum over p of partial[p * ld + c] for c < n, in a fixed order (deterministic); one
// launch on `stream`. Defined in rmsnorm_fused_cuda.cu.
void SumPartialsColumns(float* out, const float* partial, int P, int ld, int n,
                        cudaStream_t stream);

}  // namespace layers_internal
using namespace layers_internal;  // NOLINT: the layer files only

}  // namespace ablate::kernels::cuda

// The (Tin, Tout) storage pairs of the two-type templates (F(A, B) once per pair).
#define TWO_TYPES(F)   \
  F(float, float)      \
  F(float, bf16)       \
  F(bf16, float)       \
  F(bf16, bf16)
