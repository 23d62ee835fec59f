// The optimizers' update kernels (optim_cuda.h): one block per chunk, the chunk's values in
// registers (x[j] is value threadIdx.x + j * kThreads), its 8-bit state decoded with the tables
// in shared memory and re-quantized by quant_cuda.cuh. The formulas are optim_cpu.cc's, operation
// for operation; this library is compiled with --fmad=false so that nvcc contracts nothing into
// FMAs and the AdamW, direction and apply kernels round exactly as the CPU does.
#include <cuda_bf16.h>

#include <cstdint>
#include <string>

#include "ablate/cuda_status.h"
#include "cuda_block.cuh"
#include "optim/cuda/optim_cuda.h"
#include "quant/cuda/quant_cuda.cuh"

namespace ablate::kernels::cuda {
namespace {

constexpr int kChunk = kOptimChunk;  // 2048
static_assert(kChunk == kPerThread * kThreads, "a chunk is one quantization block per CUDA block");

// One state of one chunk into registers: fp32, or 8-bit decoded with `table`.
__device__ void LoadState(const DevSlot& s, int k, int64_t lo, int len, uint8_t* arena,
                          const float* table, float (&x)[kPerThread]) {
  if (s.q8) {
    const uint8_t* codes = arena + s.st[k] + lo;
    const float scale = reinterpret_cast<const float*>(arena + s.sc[k])[lo / kChunk];
    for (int j = 0; j < kPerThread; ++j) {
      const int i = threadIdx.x + j * kThreads;
      x[j] = i < len ? table[codes[i]] * scale : 0.0f;
    }
  } else {
    const float* f = reinterpret_cast<const float*>(arena + s.st[k]) + lo;
    for (int j = 0; j < kPerThread; ++j) {
      const int i = threadIdx.x + j * kThreads;
      x[j] = i < len ? f[i] : 0.0f;
    }
  }
}

__device__ void StoreState(const DevSlot& s, int k, int64_t lo, int len, uint8_t* arena,
                           bool dynamic, bool is_signed, const float* th,
                           const float (&x)[kPerThread]) {
  if (s.q8) {
    StoreQuantized(x, len, dynamic, is_signed, th, arena + s.st[k] + lo,
                   reinterpret_cast<float*>(arena + s.sc[k]) + lo / kChunk);
  } else {
    float* f = reinterpret_cast<float*>(arena + s.st[k]) + lo;
    for (int j = 0; j < kPerThread; ++j) {
      const int i = threadIdx.x + j * kThreads;
      if (i < len) f[i] = x[j];
    }
  }
}

// The schedule's learning rate of a slot, as the CPU rounds it.
__device__ float SlotLr(const DevSlot& s, const StepScalars& c) { return float(s.lr * c.lr_scale); }
__device__ float SlotDecay(const DevSlot& s, const StepScalars& c, float lr) {
  return (s.matrix && c.wd > 0) ? float(1.0 - lr * c.wd) : 1.0f;
}

enum Mode { kAdamW = 0, kRmsDirection = 1, kMomentumDirection = 2 };

// w[at] <- w[at] * decay - u (and its bf16 mirror, when kept), adding u^2 to the update's squared
// norm: the one weight write of the AdamW step and the spectral apply.
__device__ __forceinline__ void StepWeight(float* w, __nv_bfloat16* wb, int64_t at, float decay,
                                           float u, double& sq) {
  const float nw = w[at] * decay - u;
  w[at] = nw;
  if (wb != nullptr) wb[at] = __float2bfloat16_rn(nw);
  sq += double(u) * u;
}

// kAdamW: the AdamW group's full update. kRmsDirection / kMomentumDirection: the spectral group's
// state update and direction, written to dir. One block per chunk.
template <int kMode>
__global__ void __launch_bounds__(kThreads)
    StateKernel(const DevChunk* __restrict__ chunks, const DevSlot* __restrict__ slots,
                float* __restrict__ w, const float* __restrict__ g, uint8_t* __restrict__ arena,
                float* __restrict__ dir, const QuantTables* __restrict__ qt, StepScalars c,
                double* __restrict__ sq_parts, __nv_bfloat16* __restrict__ wb) {
  __shared__ SharedTables tables;
  const DevChunk ch = chunks[blockIdx.x];
  const DevSlot s = slots[ch.slot];
  const int64_t lo = ch.start;
  const int len = s.n - lo < kChunk ? int(s.n - lo) : kChunk;
  const bool dyn = qt->signed_dynamic != 0;
  if (s.q8) {
    LoadTables(qt, &tables);
    __syncthreads();
  }
  const float* gp = g + s.w_off + lo;
  float gv[kPerThread];
  for (int j = 0; j < kPerThread; ++j) {
    const int i = threadIdx.x + j * kThreads;
    gv[j] = i < len ? gp[i] : 0.0f;
  }
  float m[kPerThread];
  LoadState(s, 0, lo, len, arena, tables.st, m);

  if (kMode == kMomentumDirection) {
    float* d = dir + s.dir_off + lo;
    for (int j = 0; j < kPerThread; ++j) {
      m[j] = c.mu * m[j] + c.gain * gv[j];
      const int i = threadIdx.x + j * kThreads;
      if (i < len) d[i] = c.nesterov ? c.gain * gv[j] + c.mu * m[j] : m[j];
    }
    StoreState(s, 0, lo, len, arena, dyn, true, tables.sth, m);
    return;
  }

  float v[kPerThread];
  LoadState(s, 1, lo, len, arena, tables.ut, v);
  for (int j = 0; j < kPerThread; ++j) {
    m[j] = c.b1 * m[j] + c.omb1 * gv[j];
    v[j] = c.b2 * v[j] + c.omb2 * gv[j] * gv[j];
  }
  if (kMode == kRmsDirection) {
    float* d = dir + s.dir_off + lo;
    for (int j = 0; j < kPerThread; ++j) {
      const int i = threadIdx.x + j * kThreads;
      if (i < len) d[i] = (m[j] * c.ib1) / (sqrtf(v[j] * c.ib2) + c.eps);
    }
  } else {
    const float lr = SlotLr(s, c);
    const float decay = SlotDecay(s, c, lr);
    double sq = 0;
    for (int j = 0; j < kPerThread; ++j) {
      const int i = threadIdx.x + j * kThreads;
      if (i < len) {
        StepWeight(w, wb, s.w_off + lo + i, decay,
                   lr * (m[j] * c.ib1) / (sqrtf(v[j] * c.ib2) + c.eps), sq);
      }
    }
    if (c.want_sq) {
      sq = BlockSumDouble(sq);
      if (threadIdx.x == 0) sq_parts[blockIdx.x] = sq;
      __syncthreads();
    }
  }
  StoreState(s, 0, lo, len, arena, dyn, true, tables.sth, m);
  StoreState(s, 1, lo, len, arena, qt->unsigned_dynamic != 0, false, tables.uth, v);
}

// The spectral group's W <- W * decay - scale * Psi_p(U). One block per chunk.
__global__ void __launch_bounds__(kThreads)
    ApplyKernel(const DevChunk* __restrict__ chunks, const DevSlot* __restrict__ slots,
                float* __restrict__ w, const float* __restrict__ upd, StepScalars c,
                double* __restrict__ sq_parts, __nv_bfloat16* __restrict__ wb) {
  const DevChunk ch = chunks[blockIdx.x];
  const DevSlot s = slots[ch.slot];
  const int64_t lo = ch.start;
  const int len = s.n - lo < kChunk ? int(s.n - lo) : kChunk;
  const float lr = SlotLr(s, c);
  const float decay = SlotDecay(s, c, lr);
  const float scale = c.p_zero ? float(lr * s.p0_factor) : lr;
  const float* up = upd + s.dir_off + lo;
  double sq = 0;
  for (int j = 0; j < kPerThread; ++j) {
    const int i = threadIdx.x + j * kThreads;
    if (i < len) {
      StepWeight(w, wb, s.w_off + lo + i, decay, scale * up[i], sq);
    }
  }
  if (c.want_sq) {
    sq = BlockSumDouble(sq);
    if (threadIdx.x == 0) sq_parts[blockIdx.x] = sq;
  }
}

// out[0] = sum a, out[1] = sum b (one block, fixed order).
__global__ void SumParts(const double* a, int na, const double* b, int nb, double* out) {
  double s = 0;
  for (int i = threadIdx.x; i < na; i += blockDim.x) s += a[i];
  s = BlockSumDouble(s);
  if (threadIdx.x == 0) out[0] = s;
  __syncthreads();
  s = 0;
  for (int i = threadIdx.x; i < nb; i += blockDim.x) s += b[i];
  s = BlockSumDouble(s);
  if (threadIdx.x == 0) out[1] = s;
}

Status Launched(const char* what) {
  return CudaStatus(cudaGetLastError(), std::string(what) + ": launch failed");
}

Status CheckChunks(const char* what, int n_chunks) {
  if (n_chunks < 0) {
    return InvalidArgument(std::string(what) + ": n_chunks must be >= 0, got " +
                           std::to_string(n_chunks));
  }
  return Status::Ok();
}

}  // namespace

Status AdamWStepCuda(const DevChunk* chunks, int n_chunks, const DevSlot* slots, float* w,
                     const float* g, uint8_t* arena, const QuantTables* tables,
                     const StepScalars& c, double* sq_parts, __nv_bfloat16* wb,
                     cudaStream_t stream) {
  ABLATE_RETURN_IF_ERROR(CheckChunks("AdamWStepCuda", n_chunks));
  if (n_chunks == 0) return Status::Ok();
  StateKernel<kAdamW><<<n_chunks, kThreads, 0, stream>>>(chunks, slots, w, g, arena, nullptr,
                                                         tables, c, sq_parts, wb);
  return Launched("AdamWStepCuda");
}

Status RmsDirectionCuda(const DevChunk* chunks, int n_chunks, const DevSlot* slots,
                        const float* g, uint8_t* arena, float* dir, const QuantTables* tables,
                        const StepScalars& c, cudaStream_t stream) {
  ABLATE_RETURN_IF_ERROR(CheckChunks("RmsDirectionCuda", n_chunks));
  if (n_chunks == 0) return Status::Ok();
  StateKernel<kRmsDirection><<<n_chunks, kThreads, 0, stream>>>(
      chunks, slots, nullptr, g, arena, dir, tables, c, nullptr, nullptr);
  return Launched("RmsDirectionCuda");
}

Status MomentumDirectionCuda(const DevChunk* chunks, int n_chunks, const DevSlot* slots,
                             const float* g, uint8_t* arena, float* dir,
                             const QuantTables* tables, const StepScalars& c,
                             cudaStream_t stream) {
  ABLATE_RETURN_IF_ERROR(CheckChunks("MomentumDirectionCuda", n_chunks));
  if (n_chunks == 0) return Status::Ok();
  StateKernel<kMomentumDirection><<<n_chunks, kThreads, 0, stream>>>(
      chunks, slots, nullptr, g, arena, dir, tables, c, nullptr, nullptr);
  return Launched("MomentumDirectionCuda");
}

Status SpectralApplyCuda(const DevChunk* chunks, int n_chunks, const DevSlot* slots, float* w,
                         const float* upd, const StepScalars& c, double* sq_parts,
                         __nv_bfloat16* wb, cudaStream_t stream) {
  ABLATE_RETURN_IF_ERROR(CheckChunks("SpectralApplyCuda", n_chunks));
  if (n_chunks == 0) return Status::Ok();
  ApplyKernel<<<n_chunks, kThreads, 0, stream>>>(chunks, slots, w, upd, c, sq_parts, wb);
  return Launched("SpectralApplyCuda");
}

Status SumUpdatePartsCuda(const double* a, int na, const double* b, int nb, double* out,
                          cudaStream_t stream) {
  SumParts<<<1, kThreads, 0, stream>>>(a, na, b, nb, out);
  return Launched("SumUpdatePartsCuda");
}

}  // namespace ablate::kernels::cuda
