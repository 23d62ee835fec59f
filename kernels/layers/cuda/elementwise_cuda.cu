// The elementwise layer ops on the GPU (layers_cuda.h, "Activations", "Residual" and CastCuda:
// the contract is there): GELU (tanh approximation in the CPU's sigmoid form) and ReLU^2 forward
// and backward, the residual add and its backward, and the storage casts; each a grid-stride loop
// of 256-thread blocks launched through LaunchOverElements.
#include <cmath>
#include <cstdint>
#include <string>

#include "layers/cuda/layers_common.cuh"

namespace ablate::kernels::cuda {
namespace {

constexpr float kGeluScale = 0.7978845608028654f;
constexpr float kGeluCube = 0.044715f;

__device__ __forceinline__ float GeluSigmoid(float x) {
  const float u = kGeluScale * (x + kGeluCube * x * x * x);
  return 1.0f / (1.0f + expf(-2.0f * u));
}

template <typename Tin, typename Tout>
__global__ void GeluForwardKernel(Tout* out, const Tin* inp, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float x = ToF(inp[i]);
    out[i] = FromF<Tout>(x * GeluSigmoid(x));
  }
}

template <typename T>
__global__ void GeluBackwardKernel(T* dinp, bool accumulate, const T* inp, const T* dout,
                                   int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float x = ToF(inp[i]);
    const float sg = GeluSigmoid(x);
    const float grad = sg + 2.0f * x * sg * (1.0f - sg) * kGeluScale * (1.0f + 3.0f * kGeluCube * x * x);
    const float g = grad * ToF(dout[i]);
    dinp[i] = FromF<T>(accumulate ? ToF(dinp[i]) + g : g);
  }
}

template <typename Tin, typename Tout>
__global__ void Relu2ForwardKernel(Tout* out, const Tin* inp, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float r = fmaxf(ToF(inp[i]), 0.f);
    out[i] = FromF<Tout>(r * r);
  }
}

template <typename T>
__global__ void Relu2BackwardKernel(T* dinp, bool accumulate, const T* inp, const T* dout,
                                    int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float r = fmaxf(ToF(inp[i]), 0.f);
    const float g = 2.0f * r * ToF(dout[i]);
    dinp[i] = FromF<T>(accumulate ? ToF(dinp[i]) + g : g);
  }
}

__global__ void ResidualForwardKernel(float* out, const float* a, const float* b, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    out[i] = a[i] + b[i];
  }
}

__global__ void ResidualBackwardKernel(float* d1, float* d2, const float* dout, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    d1[i] += dout[i];
    d2[i] += dout[i];
  }
}

template <typename Tin, typename Tout>
__global__ void CastKernel(Tout* out, const Tin* inp, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    out[i] = FromF<Tout>(ToF(inp[i]));
  }
}

// The elementwise launchers' common path: the size check, nothing to launch for n == 0, 256-thread
// blocks over n elements, the launch error as a Status naming the launcher.
template <typename... KArgs, typename... Args>
Status LaunchOverElements(const char* who, int64_t n, cudaStream_t stream,
                          void (*kernel)(KArgs...), Args... args) {
  ABLATE_RETURN_IF_ERROR(CheckSizes(who, n));
  if (n == 0) return Status::Ok();
  kernel<<<Blocks(n, 256), 256, 0, stream>>>(args...);
  return Launched(who);
}

}  // namespace

template <typename Tin, typename Tout>
Status GeluForwardCuda(Tout* out, const Tin* inp, int64_t n, cudaStream_t stream) {
  return LaunchOverElements("GeluForwardCuda", n, stream,
                            GeluForwardKernel<Tin, Tout>, out, inp, n);
}
template <typename Tin, typename Tout>
Status Relu2ForwardCuda(Tout* out, const Tin* inp, int64_t n, cudaStream_t stream) {
  return LaunchOverElements("Relu2ForwardCuda", n, stream,
                            Relu2ForwardKernel<Tin, Tout>, out, inp, n);
}
template <typename T>
Status GeluBackwardCuda(T* dinp, bool accumulate, const T* inp, const T* dout, int64_t n,
                        cudaStream_t stream) {
  return LaunchOverElements("GeluBackwardCuda", n, stream,
                            GeluBackwardKernel<T>, dinp, accumulate, inp, dout, n);
}
template <typename T>
Status Relu2BackwardCuda(T* dinp, bool accumulate, const T* inp, const T* dout, int64_t n,
                         cudaStream_t stream) {
  return LaunchOverElements("Relu2BackwardCuda", n, stream,
                            Relu2BackwardKernel<T>, dinp, accumulate, inp, dout, n);
}

Status ResidualForwardCuda(float* out, const float* inp1, const float* inp2, int64_t n,
                           cudaStream_t stream) {
  return LaunchOverElements("ResidualForwardCuda", n, stream,
                            ResidualForwardKernel, out, inp1, inp2, n);
}
Status ResidualBackwardCuda(float* dinp1, float* dinp2, const float* dout, int64_t n,
                            cudaStream_t stream) {
  return LaunchOverElements("ResidualBackwardCuda", n, stream,
                            ResidualBackwardKernel, dinp1, dinp2, dout, n);
}

template <typename Tin, typename Tout>
Status CastCuda(Tout* out, const Tin* inp, int64_t n, cudaStream_t stream) {
  return LaunchOverElements("CastCuda", n, stream, CastKernel<Tin, Tout>, out, inp, n);
}

// ---------------------------------------------------------------------------------------------
// Instantiations (the combinations layers_cuda.h lists).
#define INST_ACT_FWD(A, B)                                                            \
  template Status GeluForwardCuda<A, B>(B*, const A*, int64_t, cudaStream_t);         \
  template Status Relu2ForwardCuda<A, B>(B*, const A*, int64_t, cudaStream_t);
TWO_TYPES(INST_ACT_FWD)

#define INST_ACT_BWD(T)                                                                            \
  template Status GeluBackwardCuda<T>(T*, bool, const T*, const T*, int64_t, cudaStream_t);        \
  template Status Relu2BackwardCuda<T>(T*, bool, const T*, const T*, int64_t, cudaStream_t);
INST_ACT_BWD(float)
INST_ACT_BWD(bf16)

template Status CastCuda<float, bf16>(bf16*, const float*, int64_t, cudaStream_t);
template Status CastCuda<bf16, float>(float*, const bf16*, int64_t, cudaStream_t);
template Status CastCuda<float, float>(float*, const float*, int64_t, cudaStream_t);

}  // namespace ablate::kernels::cuda
