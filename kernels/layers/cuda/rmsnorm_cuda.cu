// RMSNorm with a gain on the GPU (layers_cuda.h, "RMSNorm": the contract is there): the forward
// (one warp per row), the backward's input gradient (one warp per row) and its weight gradient
// (per-block column partials in scratch, summed in a fixed order: deterministic). The one-pass
// backward of the residual stream is rmsnorm_fused_cuda.cu.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "layers/cuda/layers_common.cuh"

namespace ablate::kernels::cuda {
namespace {

// One warp per row.
template <typename Tin, typename Tout>
__global__ void RmsNormForwardKernel(Tout* out, float* rstd, const Tin* inp, const float* weight,
                                     int64_t N, int C) {
  const int64_t row = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const Tin* x = inp + row * C;
  float ss = 0.f;
  for (int c = lane; c < C; c += 32) {
    const float v = ToF(x[c]);
    ss += v * v;
  }
  ss = WarpSum(ss);
  const float rs = 1.0f / sqrtf(ss / float(C) + kEps);
  Tout* y = out + row * C;
  for (int c = lane; c < C; c += 32) y[c] = FromF<Tout>(ToF(x[c]) * rs * weight[c]);
  if (lane == 0) rstd[row] = rs;
}

template <typename Tdout, typename Tinp>
__global__ void RmsNormBackwardInputKernel(float* dinp, bool accumulate, const Tdout* dout,
                                           const Tinp* inp, const float* weight, const float* rstd,
                                           int64_t N, int C) {
  const int64_t row = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const Tdout* dy = dout + row * C;
  const Tinp* x = inp + row * C;
  float* dx = dinp + row * C;
  const float rs = rstd[row];
  float dot = 0.f;
  for (int c = lane; c < C; c += 32) dot += weight[c] * ToF(dy[c]) * ToF(x[c]);
  dot = WarpSum(dot);
  const float k = rs * rs * rs * dot / float(C);
  for (int c = lane; c < C; c += 32) {
    const float g = rs * weight[c] * ToF(dy[c]) - k * ToF(x[c]);
    dx[c] = accumulate ? dx[c] + g : g;
  }
}

// Partial column sums of dy * x * rstd: block (p, cy) sums rows p, p + P, ... of columns
// [cy*blockDim, ...) into partial[p][c].
template <typename Tdout, typename Tinp>
__global__ void RmsNormBackwardWeightPartials(float* partial, const Tdout* dout, const Tinp* inp,
                                              const float* rstd, int64_t N, int C) {
  const int c = blockIdx.y * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float acc = 0.f;
  for (int64_t r = blockIdx.x; r < N; r += gridDim.x) {
    acc += ToF(dout[r * C + c]) * ToF(inp[r * C + c]) * rstd[r];
  }
  partial[int64_t(blockIdx.x) * C + c] = acc;
}

__global__ void SumPartialsKernel(float* dweight, const float* partial, int P, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float acc = 0.f;
  for (int p = 0; p < P; ++p) acc += partial[int64_t(p) * C + c];
  dweight[c] += acc;
}

int RmsPartials(int64_t N) { return int(std::max<int64_t>(1, std::min<int64_t>(512, (N + 63) / 64))); }

}  // namespace

template <typename Tin, typename Tout>
Status RmsNormForwardCuda(Tout* out, float* rstd, const Tin* inp, const float* weight, int64_t N,
                          int C, cudaStream_t stream) {
  ABLATE_RETURN_IF_ERROR(CheckSizes("RmsNormForwardCuda", N, C));
  if (N == 0) return Status::Ok();
  RmsNormForwardKernel<Tin, Tout><<<Blocks(N, 8), 256, 0, stream>>>(out, rstd, inp, weight, N, C);
  return Launched("RmsNormForwardCuda");
}

size_t RmsNormBackwardScratch(int64_t N, int C) { return size_t(RmsPartials(N)) * size_t(C); }

template <typename Tdout, typename Tinp>
Status RmsNormBackwardCuda(float* dinp, bool accumulate, float* dweight, const Tdout* dout,
                           const Tinp* inp, const float* weight, const float* rstd, int64_t N,
                           int C, float* scratch, size_t scratch_floats, cudaStream_t stream) {
  ABLATE_RETURN_IF_ERROR(CheckSizes("RmsNormBackwardCuda", N, C));
  if (scratch_floats < RmsNormBackwardScratch(N, C)) {
    return InvalidArgument("RmsNormBackwardCuda: scratch of " + std::to_string(scratch_floats) +
                           " floats, need " + std::to_string(RmsNormBackwardScratch(N, C)));
  }
  if (N == 0) return Status::Ok();
  RmsNormBackwardInputKernel<Tdout, Tinp>
      <<<Blocks(N, 8), 256, 0, stream>>>(dinp, accumulate, dout, inp, weight, rstd, N, C);
  const int P = RmsPartials(N);
  const int threads = std::min(256, ((C + 31) / 32) * 32);
  dim3 grid(P, (C + threads - 1) / threads);
  RmsNormBackwardWeightPartials<Tdout, Tinp><<<grid, threads, 0, stream>>>(scratch, dout, inp, rstd, N, C);
  SumPartialsKernel<<<Blocks(C, 256), 256, 0, stream>>>(dweight, scratch, P, C);
  return Launched("RmsNormBackwardCuda");
}

// ---------------------------------------------------------------------------------------------
// Instantiations (the combinations layers_cuda.h lists).
#define INST_RMS_FWD(A, B) \
  template Status RmsNormForwardCuda<A, B>(B*, float*, const A*, const float*, int64_t, int, cudaStream_t);
#define INST_RMS_BWD(A, B)                                                                        \
  template Status RmsNormBackwardCuda<A, B>(float*, bool, float*, const A*, const B*, const float*, \
                                            const float*, int64_t, int, float*, size_t, cudaStream_t);
TWO_TYPES(INST_RMS_FWD)
TWO_TYPES(INST_RMS_BWD)

}  // namespace ablate::kernels::cuda
