// 8-bit blockwise state on the GPU (kernels/ALGORITHMS.md §2.3), device side: kernels/quant's
// QuantizeBlockwise for one quantization block held in the registers of one CUDA block, the twin
// of quant_cpu.cc operation for operation (the same thresholds, round-half-even, NaN scale for a
// non-finite block, scale 0 and codes 0 for a block of zeros).
//
// Shape: a block of kThreads (256) threads holds the kQuantBlockSize (2048) values of one
// quantization block, kPerThread (8) per thread, value threadIdx.x + j * kThreads in x[j] (a
// short last block: the first `len`). The code tables (quant_cuda.h's QuantTables) are copied
// to shared memory once per block (LoadTables); a value decodes as table[code] * scale.
// Include only from .cu files. Every function must be called by all threads of the block.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda_block.cuh"
#include "quant/cuda/quant_cuda.h"
#include "quant/quant_cpu.h"

namespace ablate::kernels::cuda {

constexpr int kPerThread = int(kQuantBlockSize) / kThreads;  // 8
static_assert(int(kQuantBlockSize) % kThreads == 0, "a block must split evenly over the threads");

struct SharedTables {
  float st[256], ut[256], sth[128], uth[256];
};

__device__ inline void LoadTables(const QuantTables* q, SharedTables* s) {
  for (int i = threadIdx.x; i < 256; i += blockDim.x) {
    s->st[i] = q->signed_table[i];
    s->ut[i] = q->unsigned_table[i];
    s->uth[i] = q->unsigned_th[i];
    if (i < 128) s->sth[i] = q->signed_th[i];
  }
}

// kernels::QuantizeNormalized for one value t = x / absmax.
__device__ inline uint8_t QuantizeNormalized(float t, bool dynamic, bool is_signed,
                                             const float* th) {
  t = fminf(fmaxf(t, -1.0f), 1.0f);
  if (!is_signed && !(t > 0.0f)) return 0;
  if (!dynamic) {
    if (is_signed) return uint8_t(int8_t(int(rintf(127.0f * t))));
    return uint8_t(int(rintf(255.0f * t)));
  }
  const float a = fabsf(t);
  uint32_t u = 0;
  for (uint32_t step = is_signed ? 64u : 128u; step > 0; step >>= 1)
    u += th[u + step - 1] < a ? step : 0;
  if (is_signed && t < 0.0f && u != 0) u |= 0x80;
  return uint8_t(u);
}

// Max over the block (every thread gets it) and whether every value was finite.
__device__ inline float BlockAbsMax(float v, bool* all_finite, bool finite) {
  __shared__ float warp_max[kThreads / 32];
  __shared__ float result;
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = v;
  const int ok = __syncthreads_and(finite ? 1 : 0);
  if (threadIdx.x < 32) {
    float w = threadIdx.x < kThreads / 32 ? warp_max[threadIdx.x] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) w = fmaxf(w, __shfl_xor_sync(0xffffffffu, w, o));
    if (threadIdx.x == 0) result = w;
  }
  __syncthreads();
  *all_finite = ok != 0;
  float r = result;
  __syncthreads();  // `result` and `warp_max` may be reused by the next call
  return r;
}

// QuantizeBlockwise of one chunk held in registers (x[j] is value threadIdx.x + j * kThreads).
__device__ inline void StoreQuantized(const float (&x)[kPerThread], int len, bool dynamic,
                                      bool is_signed, const float* th, uint8_t* codes,
                                      float* scale) {
  float amax = 0.0f;
  bool finite = true;
  for (int j = 0; j < kPerThread; ++j) {
    const int i = threadIdx.x + j * kThreads;
    if (i < len) {
      const float a = fabsf(x[j]);
      finite = finite && isfinite(a);
      amax = fmaxf(amax, a);
    }
  }
  bool all_finite = true;
  amax = BlockAbsMax(amax, &all_finite, finite);
  if (!all_finite || amax == 0.0f) {
    if (threadIdx.x == 0) *scale = all_finite ? 0.0f : __int_as_float(0x7fc00000);
    for (int j = 0; j < kPerThread; ++j) {
      const int i = threadIdx.x + j * kThreads;
      if (i < len) codes[i] = 0;
    }
    return;
  }
  if (threadIdx.x == 0) *scale = amax;
  for (int j = 0; j < kPerThread; ++j) {
    const int i = threadIdx.x + j * kThreads;
    if (i < len) codes[i] = QuantizeNormalized(x[j] / amax, dynamic, is_signed, th);
  }
}

}  // namespace ablate::kernels::cuda
