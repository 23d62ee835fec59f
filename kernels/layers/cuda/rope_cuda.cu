// RoPE (rotate-half pairing) on the GPU, forward and backward (layers_cuda.h, "RoPE": the
// contract is there): grid-stride over the rotary pairs, the cos / sin tables of layers_cpu.h.
#include <cstdint>
#include <string>

#include "layers/cuda/layers_common.cuh"

namespace ablate::kernels::cuda {
namespace {

template <typename Tin, typename Tout>
__global__ void RopeForwardKernel(Tout* out, const Tin* inp, const float* cs, const float* sn,
                                  int64_t BH, int Tn, int D) {
  const int h = D / 2;
  const int64_t total = BH * Tn * h;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = idx / h;
    const int i = int(idx - row * h);
    const int t = int(row % Tn);
    const float a = ToF(inp[row * D + i]), b = ToF(inp[row * D + i + h]);
    const float c = cs[int64_t(t) * h + i], s = sn[int64_t(t) * h + i];
    out[row * D + i] = FromF<Tout>(a * c - b * s);
    out[row * D + i + h] = FromF<Tout>(a * s + b * c);
  }
}

template <typename Tdout>
__global__ void RopeBackwardKernel(float* dinp, bool accumulate, const Tdout* dout, const float* cs,
                                   const float* sn, int64_t BH, int Tn, int D) {
  const int h = D / 2;
  const int64_t total = BH * Tn * h;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = idx / h;
    const int i = int(idx - row * h);
    const int t = int(row % Tn);
    const float a = ToF(dout[row * D + i]), b = ToF(dout[row * D + i + h]);
    const float c = cs[int64_t(t) * h + i], s = sn[int64_t(t) * h + i];
    const float g0 = a * c + b * s, g1 = b * c - a * s;
    float* dx = dinp + row * D;
    dx[i] = accumulate ? dx[i] + g0 : g0;
    dx[i + h] = accumulate ? dx[i + h] + g1 : g1;
  }
}

}  // namespace

template <typename Tin, typename Tout>
Status RopeForwardCuda(Tout* out, const Tin* inp, const float* cos, const float* sin, int64_t BH,
                       int Tn, int D, cudaStream_t stream) {
  ABLATE_RETURN_IF_ERROR(CheckSizes("RopeForwardCuda", BH * Tn, D));
  if (D % 2 != 0) return InvalidArgument("RopeForwardCuda: D must be even, got " + std::to_string(D));
  if (BH * Tn == 0) return Status::Ok();
  RopeForwardKernel<Tin, Tout><<<Blocks(BH * Tn * (D / 2), 256), 256, 0, stream>>>(out, inp, cos, sin, BH, Tn, D);
  return Launched("RopeForwardCuda");
}

template <typename Tdout>
Status RopeBackwardCuda(float* dinp, bool accumulate, const Tdout* dout, const float* cos,
                        const float* sin, int64_t BH, int Tn, int D, cudaStream_t stream) {
  ABLATE_RETURN_IF_ERROR(CheckSizes("RopeBackwardCuda", BH * Tn, D));
  if (D % 2 != 0) return InvalidArgument("RopeBackwardCuda: D must be even, got " + std::to_string(D));
  if (BH * Tn == 0) return Status::Ok();
  RopeBackwardKernel<Tdout><<<Blocks(BH * Tn * (D / 2), 256), 256, 0, stream>>>(dinp, accumulate, dout, cos, sin, BH, Tn, D);
  return Launched("RopeBackwardCuda");
}

// ---------------------------------------------------------------------------------------------
// Instantiations (the combinations layers_cuda.h lists).
#define INST_ROPE_FWD(A, B)                                                                      \
  template Status RopeForwardCuda<A, B>(B*, const A*, const float*, const float*, int64_t, int, int, \
                                        cudaStream_t);
TWO_TYPES(INST_ROPE_FWD)

#define INST_ROPE_BWD(T)                                                                           \
  template Status RopeBackwardCuda<T>(float*, bool, const T*, const float*, const float*, int64_t, \
                                      int, int, cudaStream_t);
INST_ROPE_BWD(float)
INST_ROPE_BWD(bf16)

}  // namespace ablate::kernels::cuda
