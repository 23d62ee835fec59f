// Small pieces shared by the optimizer's CUDA files: CUDA/cuBLAS errors -> Status, a block sum in
// double, and launch geometry. Internal to worker/trainer/optim/cuda.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "ablate/cuda_status.h"
#include "ablate/status.h"

namespace ablate::trainer::cuda {

inline Status BlasStatus(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  return Internal(std::string(what) + ": " + cublasGetStatusName(s));
}

// Device allocation with a message that names the size.
inline Status DeviceAlloc(void** p, size_t bytes, const char* what) {
  *p = nullptr;
  if (bytes == 0) return Status::Ok();
  cudaError_t e = cudaMalloc(p, bytes);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return Internal(std::string(what) + ": cudaMalloc of " + std::to_string(bytes) +
                    " bytes failed: " + cudaGetErrorString(e));
  }
  return Status::Ok();
}

constexpr int kThreads = 256;  // every elementwise kernel's block size

// Blocks for `n` elements at kThreads per block, capped (the kernels loop grid-stride).
inline unsigned GridFor(int64_t n, int64_t cap = 4096) {
  return unsigned(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, cap));
}

// Sum over a block of kThreads threads, in a fixed order (deterministic). The result is valid in
// thread 0. Uses shared memory: call at most once per kernel between __syncthreads().
__device__ inline double BlockSumDouble(double v) {
  __shared__ double warp_sums[kThreads / 32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  v = 0;
  if (warp == 0) {
    v = lane < kThreads / 32 ? warp_sums[lane] : 0.0;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  }
  return v;
}

}  // namespace ablate::trainer::cuda
