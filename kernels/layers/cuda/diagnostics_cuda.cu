// The diagnostics helpers on the GPU (layers_cuda.h, "Diagnostics helpers": the contract is
// there): the tensor comparison sums (double atomics: the last bits vary run to run) and the max
// causal logit (a plain dot-product kernel with an atomic max). Not on the training path.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "layers/cuda/layers_common.cuh"

namespace ablate::kernels::cuda {
namespace {

template <typename Tx, typename Ty>
__global__ void CompareKernel(double* acc, const Tx* x, const Ty* y, int64_t n) {
  double a[6] = {0, 0, 0, 0, 0, 0};
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const double xv = ToF(x[i]), yv = ToF(y[i]), d = xv - yv;
    a[0] += xv * yv;
    a[1] += xv * xv;
    a[2] += yv * yv;
    a[3] += d * d;
    a[4] += fabs(d);
    a[5] += fabs(yv);
  }
  __shared__ double sh[6][256];
  for (int k = 0; k < 6; ++k) sh[k][threadIdx.x] = a[k];
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if (int(threadIdx.x) < w) {
      for (int k = 0; k < 6; ++k) sh[k][threadIdx.x] += sh[k][threadIdx.x + w];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    for (int k = 0; k < 6; ++k) atomicAdd(acc + k, sh[k][0]);
  }
}

__device__ __forceinline__ void AtomicMaxFloat(float* addr, float v) {
  if (v >= 0) {
    atomicMax(reinterpret_cast<int*>(addr), __float_as_int(v));
  } else {
    atomicMin(reinterpret_cast<unsigned*>(addr), __float_as_uint(v));
  }
}

__global__ void InitMaxKernel(float* out) { *out = -INFINITY; }

// Block per (bh, i): threads over keys j <= i.
__global__ void MaxCausalLogitKernel(float* out, const bf16* q, const bf16* k, int Tn, int D,
                                     float tau) {
  extern __shared__ float qs[];
  const int64_t bh = blockIdx.y;
  const int i = blockIdx.x;
  const bf16* qi = q + (bh * Tn + i) * D;
  for (int d = threadIdx.x; d < D; d += blockDim.x) qs[d] = __bfloat162float(qi[d]);
  __syncthreads();
  float mx = -INFINITY;
  for (int j = threadIdx.x; j <= i; j += blockDim.x) {
    const bf16* kj = k + (bh * Tn + j) * D;
    float dot = 0.f;
    for (int d = 0; d < D; ++d) dot += qs[d] * __bfloat162float(kj[d]);
    mx = fmaxf(mx, dot * tau);
  }
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  if (threadIdx.x % 32 == 0 && mx > -INFINITY) AtomicMaxFloat(out, mx);
}

}  // namespace

template <typename Tx, typename Ty>
Status CompareAccumulateCuda(double* acc, const Tx* x, const Ty* y, int64_t n,
                             cudaStream_t stream) {
  ABLATE_RETURN_IF_ERROR(CheckSizes("CompareAccumulateCuda", n));
  if (n == 0) return Status::Ok();
  CompareKernel<Tx, Ty><<<std::min(Blocks(n, 256), 1024u), 256, 0, stream>>>(acc, x, y, n);
  return Launched("CompareAccumulateCuda");
}

Status InitMaxCuda(float* out, cudaStream_t stream) {
  InitMaxKernel<<<1, 1, 0, stream>>>(out);
  return Launched("InitMaxCuda");
}

Status MaxCausalLogitCuda(float* out, const bf16* q, const bf16* k, int64_t BH, int Tn, int D,
                          float tau, cudaStream_t stream) {
  ABLATE_RETURN_IF_ERROR(CheckSizes("MaxCausalLogitCuda", BH * Tn, D));
  if (BH > 65535) return InvalidArgument("MaxCausalLogitCuda: B*H > 65535");
  if (BH * Tn == 0) return Status::Ok();
  dim3 grid(Tn, unsigned(BH));
  MaxCausalLogitKernel<<<grid, 128, D * sizeof(float), stream>>>(out, q, k, Tn, D, tau);
  return Launched("MaxCausalLogitCuda");
}

// ---------------------------------------------------------------------------------------------
// Instantiations (the combinations layers_cuda.h lists).
template Status CompareAccumulateCuda<float, float>(double*, const float*, const float*, int64_t,
                                                    cudaStream_t);
template Status CompareAccumulateCuda<bf16, bf16>(double*, const bf16*, const bf16*, int64_t,
                                                  cudaStream_t);

}  // namespace ablate::kernels::cuda
