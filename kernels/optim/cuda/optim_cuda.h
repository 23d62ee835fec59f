// The optimizers' update kernels on the GPU: the device twins of kernels/optim/optim_cpu.h's
// per-element rules (kernels/ALGORITHMS.md §2.1), over fp32 or 8-bit blockwise state (§2.3,
// quant/cuda). trainer::cuda::DeviceOptimizer (worker/trainer/cuda/device_optimizer.h) owns the
// tables below and drives these launchers; Psi_p between the direction and the apply is
// spectral/cuda.
//
// Work runs over chunks: kOptimChunk (2048) consecutive values of one tensor (a slot), starting
// at a multiple of kOptimChunk from the tensor's first value, so that a chunk is exactly one
// quantization block of kernels/quant and one CUDA block (256 threads x 8 values) owns it. The
// caller uploads the slot table (DevSlot), the chunk lists (DevChunk), the code tables
// (QuantTables) and the state arena; each launcher takes one chunk list.
// Rounding: every formula is written as on the CPU, operation for operation, and the kernels are
// compiled with --fmad=false (nothing contracted into FMAs), so fp32 and 8-bit state reproduce
// the CPU bit for bit given the same StepScalars (computed on the host as the CPU computes them).
//
// Launchers: enqueue on `stream`, never synchronize, OK without a launch for n_chunks == 0,
// InvalidArgument for n_chunks < 0, Internal when the launch fails. Buffers are device pointers;
// wb (the bf16 mirror of the weights, same flat layout) and sq_parts may be null where noted.
// Thread safety: reentrant; calls sharing buffers must be ordered on one stream.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "ablate/status.h"
#include "quant/cuda/quant_cuda.h"
#include "quant/quant_cpu.h"

namespace ablate::kernels::cuda {

inline constexpr int kOptimChunk = int(kQuantBlockSize);  // values per chunk (one CUDA block)

// One tensor of the optimizer, as the kernels see it.
struct DevSlot {
  int64_t w_off = 0;  // into weights / grads
  int64_t n = 0;
  int64_t dir_off = 0;     // spectral: into the direction / update batches
  int64_t st[2] = {0, 0};  // byte offsets into the state arena (fp32 values, or 8-bit codes)
  int64_t sc[2] = {0, 0};  // 8-bit: byte offsets of the block scales
  double lr = 0;           // before the schedule
  double p0_factor = 1;    // sqrt(max(1, rows / cols))
  int matrix = 0;
  int q8 = 0;
};

struct DevChunk {
  int slot;
  int64_t start;  // first value, inside the tensor
};

// Per-step scalars, computed on the host exactly as the CPU computes them.
struct StepScalars {
  float b1, b2, omb1, omb2, eps, ib1, ib2;
  float mu, gain;
  int nesterov;
  double lr_scale, wd;
  int p_zero;
  int want_sq;
};

// The AdamW group's full update (optim_cpu.h's AdamWUpdate) on the chunks: per slot, m and v (state
// 0 and 1 in the arena, fp32 or 8-bit) updated, w <- w * decay - u, wb (when not null) = bf16(w)
// of every value written. With c.want_sq, sq_parts[i] = the sum of u^2 over chunk i (double).
Status AdamWStepCuda(const DevChunk* chunks, int n_chunks, const DevSlot* slots, float* w,
                     const float* g, uint8_t* arena, const QuantTables* tables,
                     const StepScalars& c, double* sq_parts, __nv_bfloat16* wb,
                     cudaStream_t stream);

// The spectral group's state update and direction (optim_cpu.h's RmsDirection, and
// MomentumDirection with state 0 as B), the direction written to dir at each slot's dir_off.
Status RmsDirectionCuda(const DevChunk* chunks, int n_chunks, const DevSlot* slots,
                        const float* g, uint8_t* arena, float* dir, const QuantTables* tables,
                        const StepScalars& c, cudaStream_t stream);
Status MomentumDirectionCuda(const DevChunk* chunks, int n_chunks, const DevSlot* slots,
                             const float* g, uint8_t* arena, float* dir,
                             const QuantTables* tables, const StepScalars& c,
                             cudaStream_t stream);

// The spectral group's apply (optim_cpu.h's ApplySpectralUpdate): w <- w * decay - scale * upd at
// each slot's dir_off (scale: lr, times p0_factor when c.p_zero); wb and sq_parts as
// AdamWStepCuda.
Status SpectralApplyCuda(const DevChunk* chunks, int n_chunks, const DevSlot* slots, float* w,
                         const float* upd, const StepScalars& c, double* sq_parts,
                         __nv_bfloat16* wb, cudaStream_t stream);

// out[0] = the sum of a[0, na), out[1] = the sum of b[0, nb), in double in a fixed order (one
// block): the squared norms of the two groups' updates from their sq_parts.
Status SumUpdatePartsCuda(const double* a, int na, const double* b, int nb, double* out,
                          cudaStream_t stream);

}  // namespace ablate::kernels::cuda
