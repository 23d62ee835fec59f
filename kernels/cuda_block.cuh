// Block-level device pieces shared by the kernels of more than one op family (spectral/cuda,
// quant/cuda, optim/cuda): the block size of their elementwise kernels, the grid of a grid-stride
// launch, and a block sum in double in a fixed order (deterministic run to run). Include only from
// .cu files (and the .cuh files they include).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace ablate::kernels::cuda {

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

}  // namespace ablate::kernels::cuda
