// The loss and the gradient-norm reductions on the GPU (layers_cuda.h, "Fused classifier" and
// "Global gradient norm and clipping": the contract is there): the softmax cross-entropy (one
// block per row, online max and sum, no stored probabilities; 16-byte loads for aligned bf16
// rows), the mean loss accumulated in double, the sum of squares (per-block partials summed in
// order in double) and the clip by the global norm. Every reduction has a fixed order: results
// are bit-identical run to run.
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "layers/cuda/layers_common.cuh"

namespace ablate::kernels::cuda {
namespace {

// Online (max, sum of exp) pairs; the neutral element is (-inf, 0).
__device__ __forceinline__ void CombineMaxSum(float& m, float& s, float m2, float s2) {
  if (m2 == -INFINITY) return;
  if (m == -INFINITY) {
    m = m2;
    s = s2;
    return;
  }
  const float mn = fmaxf(m, m2);
  s = s * expf(m - mn) + s2 * expf(m2 - mn);
  m = mn;
}

constexpr int kCeThreads = 512;

// The end of a softmax-cross-entropy row: every thread's online (max, sum) pair combined over the
// block (warp shuffles, then warp 0's thread 0 over the warps), lse = log(sum) + max; thread 0
// reads the target logit (z_target()) and writes losses[r] = lse - z_target when losses is set.
// Returns lse to every thread.
template <typename ZTarget>
__device__ __forceinline__ float BlockLseAndLoss(float m, float s, ZTarget z_target,
                                                 float* losses, int64_t r) {
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
    const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
    CombineMaxSum(m, s, m2, s2);
  }
  __shared__ float sm[kCeThreads / 32], ss[kCeThreads / 32];
  __shared__ float lse_shared, ztgt_shared;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    sm[warp] = m;
    ss[warp] = s;
  }
  if (threadIdx.x == 0) ztgt_shared = z_target();
  __syncthreads();
  if (threadIdx.x == 0) {
    float M = -INFINITY, S = 0.f;
    for (int w = 0; w < int(blockDim.x / 32); ++w) CombineMaxSum(M, S, sm[w], ss[w]);
    lse_shared = logf(S) + M;
    if (losses != nullptr) losses[r] = lse_shared - ztgt_shared;
  }
  __syncthreads();
  return lse_shared;
}

template <typename T>
__global__ void __launch_bounds__(kCeThreads) SoftmaxCrossEntropyKernel(
    float* losses, T* dlogits, const T* logits, const int32_t* targets, int V, float dloss) {
  const int64_t r = blockIdx.x;
  const T* z = logits + r * V;
  const int tgt = targets[r];
  float m = -INFINITY, s = 0.f;
  for (int j = threadIdx.x; j < V; j += blockDim.x) {
    const float v = ToF(z[j]);
    if (v > m) {
      s = (m == -INFINITY ? 0.f : s * expf(m - v)) + 1.0f;
      m = v;
    } else {
      s += expf(v - m);
    }
  }
  const float lse = BlockLseAndLoss(m, s, [&] { return ToF(z[tgt]); }, losses, r);
  if (dlogits == nullptr) return;
  T* dz = dlogits + r * V;
  for (int j = threadIdx.x; j < V; j += blockDim.x) {
    const float p = expf(ToF(z[j]) - lse);
    dz[j] = FromF<T>(dloss * (p - (j == tgt ? 1.0f : 0.0f)));
  }
}

// SoftmaxCrossEntropyKernel for bf16 rows of V % 8 == 0 on 16-byte boundaries: 16-byte loads
// and stores (8 logits each), the same arithmetic per element.
__global__ void __launch_bounds__(kCeThreads)
    SoftmaxCrossEntropyBf16x8Kernel(float* losses, bf16* dlogits, const bf16* logits,
                                    const int32_t* targets, int V, float dloss) {
  const int64_t r = blockIdx.x;
  const uint4* z = reinterpret_cast<const uint4*>(logits + r * V);
  const int nv = V / 8;
  const int tgt = targets[r];
  float m = -INFINITY, s = 0.f;
  for (int j = threadIdx.x; j < nv; j += blockDim.x) {
    const uint4 u = z[j];
    const bf16* e = reinterpret_cast<const bf16*>(&u);
    float x[8];
    float mx = -INFINITY;
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      x[q] = __bfloat162float(e[q]);
      mx = fmaxf(mx, x[q]);
    }
    if (mx == -INFINITY) continue;
    if (mx > m) {
      s = m == -INFINITY ? 0.f : s * expf(m - mx);
      m = mx;
    }
#pragma unroll
    for (int q = 0; q < 8; ++q) s += expf(x[q] - m);
  }
  const float lse =
      BlockLseAndLoss(m, s, [&] { return __bfloat162float(logits[r * V + tgt]); }, losses, r);
  if (dlogits == nullptr) return;
  uint4* dz = reinterpret_cast<uint4*>(dlogits + r * V);
  for (int j = threadIdx.x; j < nv; j += blockDim.x) {
    const uint4 u = z[j];
    const bf16* e = reinterpret_cast<const bf16*>(&u);
    uint4 o;
    bf16* oe = reinterpret_cast<bf16*>(&o);
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      const float p = expf(__bfloat162float(e[q]) - lse);
      oe[q] = __float2bfloat16_rn(dloss * (p - (8 * j + q == tgt ? 1.0f : 0.0f)));
    }
    dz[j] = o;
  }
}

// One block of 1024 threads; fixed assignment and tree: deterministic.
__global__ void AccumulateMeanKernel(double* acc, const float* x, int64_t n) {
  __shared__ double sh[1024];
  double s = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += double(x[i]);
  sh[threadIdx.x] = s;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if (int(threadIdx.x) < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) acc[0] += double(float(sh[0] / double(n)));
}

constexpr int kSsThreads = 256;
constexpr int kSsMaxBlocks = 1024;

__global__ void SumSquaresPartialKernel(float* partial, const float* x, size_t n) {
  __shared__ float sh[kSsThreads];
  float s = 0.f;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    s += x[i] * x[i];
  }
  sh[threadIdx.x] = s;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if (int(threadIdx.x) < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = sh[0];
}

__global__ void SumPartialsDoubleKernel(double* out, const float* partial, int P) {
  if (threadIdx.x != 0) return;
  double s = 0;
  for (int p = 0; p < P; ++p) s += double(partial[p]);
  out[0] = s;
}

__global__ void ClipKernel(float* x, size_t n, const double* sumsq, double max_norm) {
  const double norm = sqrt(*sumsq);
  if (!(max_norm > 0 && norm > max_norm)) return;
  const float s = float(max_norm / norm);
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    x[i] *= s;
  }
}

}  // namespace

template <typename T>
Status SoftmaxCrossEntropyCuda(float* losses, T* dlogits, const T* logits, const int32_t* targets,
                               int64_t N, int V, float dloss, cudaStream_t stream) {
  ABLATE_RETURN_IF_ERROR(CheckSizes("SoftmaxCrossEntropyCuda", N, V));
  if (N > 0x7fffffff) return InvalidArgument("SoftmaxCrossEntropyCuda: too many rows");
  if (N == 0) return Status::Ok();
  if constexpr (std::is_same_v<T, bf16>) {
    if (V % 8 == 0 && Aligned16(logits) && (dlogits == nullptr || Aligned16(dlogits))) {
      SoftmaxCrossEntropyBf16x8Kernel<<<unsigned(N), kCeThreads, 0, stream>>>(
          losses, dlogits, logits, targets, V, dloss);
      return Launched("SoftmaxCrossEntropyCuda");
    }
  }
  SoftmaxCrossEntropyKernel<T><<<unsigned(N), kCeThreads, 0, stream>>>(losses, dlogits, logits,
                                                                     targets, V, dloss);
  return Launched("SoftmaxCrossEntropyCuda");
}

Status AccumulateMeanCuda(double* acc, const float* x, int64_t n, cudaStream_t stream) {
  ABLATE_RETURN_IF_ERROR(CheckSizes("AccumulateMeanCuda", n));
  if (n == 0) return InvalidArgument("AccumulateMeanCuda: the mean of no values");
  AccumulateMeanKernel<<<1, 1024, 0, stream>>>(acc, x, n);
  return Launched("AccumulateMeanCuda");
}

size_t SumSquaresScratch(size_t n) {
  return size_t(std::max<int64_t>(1, std::min<int64_t>(kSsMaxBlocks, (int64_t(n) + 2047) / 2048)));
}

Status SumSquaresCuda(double* out, const float* x, size_t n, float* scratch, size_t scratch_floats,
                      cudaStream_t stream) {
  const size_t P = SumSquaresScratch(n);
  if (scratch_floats < P) return InvalidArgument("SumSquaresCuda: scratch too small");
  SumSquaresPartialKernel<<<unsigned(P), kSsThreads, 0, stream>>>(scratch, x, n);
  SumPartialsDoubleKernel<<<1, 32, 0, stream>>>(out, scratch, int(P));
  return Launched("SumSquaresCuda");
}

Status ClipByNormCuda(float* x, size_t n, const double* sumsq, double max_norm,
                      cudaStream_t stream) {
  if (n == 0) return Status::Ok();
  ClipKernel<<<Blocks(int64_t(n), 256 * 4), 256, 0, stream>>>(x, n, sumsq, max_norm);
  return Launched("ClipByNormCuda");
}

// ---------------------------------------------------------------------------------------------
// Instantiations (the combinations layers_cuda.h lists).
template Status SoftmaxCrossEntropyCuda<float>(float*, float*, const float*, const int32_t*,
                                               int64_t, int, float, cudaStream_t);
template Status SoftmaxCrossEntropyCuda<bf16>(float*, bf16*, const bf16*, const int32_t*, int64_t,
                                              int, float, cudaStream_t);

}  // namespace ablate::kernels::cuda
