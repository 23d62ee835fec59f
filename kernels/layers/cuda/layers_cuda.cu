// Device layers: see layers_cuda.h for the contract of every function.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>

#include "ablate/cuda_status.h"
#include "layers/cuda/layers_cuda.h"

namespace ablate::kernels::cuda {
namespace {

constexpr float kEps = 1e-6f;  // kernels::kRmsNormEps
constexpr float kGeluScale = 0.7978845608028654f;
constexpr float kGeluCube = 0.044715f;

__device__ __forceinline__ float ToF(float x) { return x; }
__device__ __forceinline__ float ToF(bf16 x) { return __bfloat162float(x); }
template <typename T>
__device__ __forceinline__ T FromF(float x);
template <>
__device__ __forceinline__ float FromF<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ bf16 FromF<bf16>(float x) {
  return __float2bfloat16_rn(x);
}

Status Launched(const char* what) {
  return CudaStatus(cudaGetLastError(), std::string(what) + ": launch failed");
}

Status CheckSizes(const char* what, int64_t n, int64_t c = 1) {
  if (n < 0 || c <= 0) {
    return InvalidArgument(std::string(what) + ": sizes must be positive (got " + std::to_string(n) +
                           ", " + std::to_string(c) + ")");
  }
  return Status::Ok();
}

unsigned Blocks(int64_t n, int threads) {
  int64_t b = (n + threads - 1) / threads;
  return unsigned(std::max<int64_t>(1, std::min<int64_t>(b, 1 << 30)));
}

__device__ __forceinline__ float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// ---------------------------------------------------------------------------------------------
__global__ void EncoderForwardKernel(float* out, const int32_t* tokens, const float* wte, int64_t N,
                                     int C) {
  const int64_t total = N * C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / C;
    const int c = int(i - r * C);
    out[i] = wte[int64_t(tokens[r]) * C + c];
  }
}

__global__ void EncoderBackwardKernel(float* dwte, const float* dout, const int32_t* unique,
                                      const int32_t* offsets, const int32_t* rows, int C) {
  const int u = blockIdx.x;
  const int tok = unique[u];
  const int begin = offsets[u], end = offsets[u + 1];
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float acc = 0.f;
    for (int i = begin; i < end; ++i) acc += dout[int64_t(rows[i]) * C + c];
    dwte[int64_t(tok) * C + c] += acc;
  }
}

// The planned embedding backward (see EncoderBackwardPlan). Kernel 1: one block per chunk, each
// thread a column (or 4 with float4), the chunk's rows summed in ascending order.
template <bool kVec>
__global__ void EncoderChunkKernel(float* dwte, float* scratch, const float* dout,
                                   const int32_t* rows, const int32_t* chunk_begin,
                                   const int32_t* chunk_token, const int32_t* chunk_slot, int C) {
  const int ch = blockIdx.x;
  const int begin = chunk_begin[ch], end = chunk_begin[ch + 1];
  const int slot = chunk_slot[ch];
  float* dst = slot < 0 ? dwte + int64_t(chunk_token[ch]) * C : scratch + int64_t(slot) * C;
  if (kVec) {
    const int C4 = C / 4;
    for (int c = threadIdx.x; c < C4; c += blockDim.x) {
      float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
      for (int i = begin; i < end; ++i) {
        const float4 x = reinterpret_cast<const float4*>(dout + int64_t(rows[i]) * C)[c];
        acc.x += x.x;
        acc.y += x.y;
        acc.z += x.z;
        acc.w += x.w;
      }
      float4* d = reinterpret_cast<float4*>(dst) + c;
      if (slot < 0) {
        float4 o = *d;
        o.x += acc.x;
        o.y += acc.y;
        o.z += acc.z;
        o.w += acc.w;
        *d = o;
      } else {
        *d = acc;
      }
    }
  } else {
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
      float acc = 0.f;
      for (int i = begin; i < end; ++i) acc += dout[int64_t(rows[i]) * C + c];
      if (slot < 0) {
        dst[c] += acc;
      } else {
        dst[c] = acc;
      }
    }
  }
}

// Kernel 2: a token with several chunks gets its chunk sums in chunk order. Grid (tokens,
// column blocks): the token count can pass gridDim.y's 65535 with a large vocabulary.
__global__ void EncoderMultiKernel(float* dwte, const float* scratch, const int32_t* multi_token,
                                   const int32_t* multi_begin, int C) {
  const int m = blockIdx.x;
  const int c = blockIdx.y * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float tot = 0.f;
  for (int s = multi_begin[m]; s < multi_begin[m + 1]; ++s) tot += scratch[int64_t(s) * C + c];
  dwte[int64_t(multi_token[m]) * C + c] += tot;
}

// ---------------------------------------------------------------------------------------------
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

// ---------------------------------------------------------------------------------------------
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

// ---------------------------------------------------------------------------------------------
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

// ---------------------------------------------------------------------------------------------
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

// ---------------------------------------------------------------------------------------------
// Element i of a (B, Tn, 3, H, D) qkv tensor (C = H * D): which of q, k, v (0, 1, 2) it belongs
// to and its index in that tensor's (B, H, Tn, D) layout.
__device__ __forceinline__ int64_t QkvHeadsIndex(int64_t i, int64_t C, int Tn, int H, int D,
                                                 int* which) {
  const int64_t bt = i / (3 * C);
  const int64_t rem = i - bt * 3 * C;
  *which = int(rem / C);
  const int64_t hc = rem - *which * C;
  const int h = int(hc / D), d = int(hc - int64_t(h) * D);
  const int64_t b = bt / Tn, t = bt - b * Tn;
  return ((b * H + h) * Tn + t) * D + d;
}

template <typename Tin, typename Tqk, typename Tv>
__global__ void QkvSplitForwardKernel(Tqk* q, Tqk* k, Tv* v, const Tin* qkv, int B, int Tn, int H,
                                      int D) {
  const int64_t C = int64_t(H) * D;
  const int64_t total = int64_t(B) * Tn * 3 * C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    int which;
    const int64_t dst = QkvHeadsIndex(i, C, Tn, H, D, &which);
    const float x = ToF(qkv[i]);
    if (which == 0) {
      q[dst] = FromF<Tqk>(x);
    } else if (which == 1) {
      k[dst] = FromF<Tqk>(x);
    } else {
      v[dst] = FromF<Tv>(x);
    }
  }
}

template <typename Tqk, typename Tv, typename Tout>
__global__ void QkvSplitBackwardKernel(Tout* dqkv, const Tqk* dq, const Tqk* dk, const Tv* dv, int B,
                                       int Tn, int H, int D) {
  const int64_t C = int64_t(H) * D;
  const int64_t total = int64_t(B) * Tn * 3 * C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    int which;
    const int64_t src = QkvHeadsIndex(i, C, Tn, H, D, &which);
    const float g = which == 0 ? ToF(dq[src]) : which == 1 ? ToF(dk[src]) : ToF(dv[src]);
    dqkv[i] = FromF<Tout>(g);
  }
}

template <typename T>
__global__ void HeadsMergeForwardKernel(T* out, const T* inp, int B, int Tn, int H, int D) {
  const int64_t C = int64_t(H) * D;
  const int64_t total = int64_t(B) * Tn * C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t bt = i / C;
    const int64_t hc = i - bt * C;
    const int h = int(hc / D), d = int(hc - int64_t(h) * D);
    const int64_t b = bt / Tn, t = bt - b * Tn;
    out[i] = inp[((b * H + h) * Tn + t) * D + d];
  }
}

template <typename T>
__global__ void HeadsMergeBackwardKernel(T* dinp, const T* dout, int B, int Tn, int H, int D) {
  const int64_t C = int64_t(H) * D;
  const int64_t total = int64_t(B) * Tn * C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    // i indexes dinp (B, H, Tn, D).
    const int64_t row = i / D;
    const int d = int(i - row * D);
    const int64_t t = row % Tn;
    const int64_t bh = row / Tn;
    const int64_t h = bh % H, b = bh / H;
    dinp[i] = dout[(b * Tn + t) * C + h * D + d];
  }
}

// 16-byte vectors (8 bf16) of one head's row: one 32-bit index split per vector instead of
// 64-bit ones per element. D % 8 == 0, 16-byte aligned buffers, B*Tn*H*D < 2^31 (the launchers
// check and otherwise take the per-element kernels above).
__global__ void HeadsMergeForwardVecKernel(uint4* out, const uint4* inp, int Tn, int H, int D8,
                                           int total8) {
  const int C8 = H * D8;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total8; i += gridDim.x * blockDim.x) {
    const int bt = i / C8, hc = i - bt * C8;
    const int h = hc / D8, d = hc - h * D8;
    const int b = bt / Tn, t = bt - b * Tn;
    out[i] = inp[((b * H + h) * Tn + t) * D8 + d];
  }
}

__global__ void HeadsMergeBackwardVecKernel(uint4* dinp, const uint4* dout, int Tn, int H, int D8,
                                            int total8) {
  const int C8 = H * D8;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total8; i += gridDim.x * blockDim.x) {
    // i indexes dinp (B, H, Tn, D).
    const int row = i / D8, d = i - row * D8;
    const int bh = row / Tn, t = row - bh * Tn;
    const int b = bh / H, h = bh - b * H;
    dinp[i] = dout[(b * Tn + t) * C8 + h * D8 + d];
  }
}

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// ---------------------------------------------------------------------------------------------
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

// =============================================================================================
Status EncoderForwardCuda(float* out, const int32_t* tokens, const float* wte, int64_t N, int C,
                          cudaStream_t stream) {
  ABLATE_RETURN_IF_ERROR(CheckSizes("EncoderForwardCuda", N, C));
  if (N == 0) return Status::Ok();
  EncoderForwardKernel<<<Blocks(N * C, 256), 256, 0, stream>>>(out, tokens, wte, N, C);
  return Launched("EncoderForwardCuda");
}

void BuildTokenBuckets(const int32_t* tokens, int64_t N, int V, TokenBuckets* out) {
  std::vector<int32_t> count(size_t(V) + 1, 0);
  for (int64_t i = 0; i < N; ++i) ++count[size_t(tokens[i]) + 1];
  out->tokens.clear();
  out->offsets.assign(1, 0);
  std::vector<int32_t> start(size_t(V) + 1, 0);
  for (int v = 0; v < V; ++v) start[v + 1] = start[v] + count[v + 1];
  for (int v = 0; v < V; ++v) {
    if (count[v + 1] > 0) {
      out->tokens.push_back(v);
      out->offsets.push_back(start[v + 1]);
    }
  }
  out->rows.assign(size_t(N), 0);
  std::vector<int32_t> pos(start.begin(), start.end() - 1);
  for (int64_t i = 0; i < N; ++i) out->rows[size_t(pos[tokens[i]]++)] = int32_t(i);
}

Status EncoderBackwardCuda(float* dwte, const float* dout, const int32_t* unique,
                           const int32_t* offsets, const int32_t* rows, int n_unique, int C,
                           cudaStream_t stream) {
  ABLATE_RETURN_IF_ERROR(CheckSizes("EncoderBackwardCuda", n_unique, C));
  if (n_unique == 0) return Status::Ok();
  const int threads = std::min(256, ((C + 31) / 32) * 32);
  EncoderBackwardKernel<<<n_unique, threads, 0, stream>>>(dwte, dout, unique, offsets, rows, C);
  return Launched("EncoderBackwardCuda");
}

size_t EncoderBackwardPlanInts(int64_t N) {
  return size_t(4 * N + 5 * (N / kEncoderChunkRows) + 8);
}

size_t EncoderBackwardScratch(int64_t N, int C) {
  return size_t(2 * (N / kEncoderChunkRows) + 2) * size_t(std::max(C, 1));
}

void BuildEncoderBackwardPlan(const int32_t* tokens, int64_t N, int V, EncoderBackwardPlan* out) {
  TokenBuckets bk;
  BuildTokenBuckets(tokens, N, V, &bk);
  const int n_unique = int(bk.tokens.size());
  std::vector<int32_t> chunk_begin, chunk_token, chunk_slot, multi_token, multi_begin;
  int slots = 0;
  for (int u = 0; u < n_unique; ++u) {
    const int begin = bk.offsets[u], end = bk.offsets[u + 1];
    const bool multi = end - begin > kEncoderChunkRows;
    if (multi) {
      multi_token.push_back(bk.tokens[u]);
      multi_begin.push_back(slots);
    }
    for (int lo = begin; lo < end; lo += kEncoderChunkRows) {
      chunk_begin.push_back(lo);
      chunk_token.push_back(bk.tokens[u]);
      chunk_slot.push_back(multi ? slots++ : -1);
    }
  }
  chunk_begin.push_back(int32_t(N));
  multi_begin.push_back(slots);
  out->n = N;
  out->n_chunks = int(chunk_token.size());
  out->n_multi = int(multi_token.size());
  out->n_slots = slots;
  auto& d = out->data;
  d.clear();
  d.reserve(EncoderBackwardPlanInts(N));
  d.insert(d.end(), bk.rows.begin(), bk.rows.end());
  d.insert(d.end(), chunk_begin.begin(), chunk_begin.end());
  d.insert(d.end(), chunk_token.begin(), chunk_token.end());
  d.insert(d.end(), chunk_slot.begin(), chunk_slot.end());
  d.insert(d.end(), multi_token.begin(), multi_token.end());
  d.insert(d.end(), multi_begin.begin(), multi_begin.end());
}

Status EncoderBackwardPlannedCuda(float* dwte, const float* dout, const EncoderBackwardPlan& plan,
                                  const int32_t* d_data, int C, float* scratch,
                                  size_t scratch_floats, cudaStream_t stream) {
  ABLATE_RETURN_IF_ERROR(CheckSizes("EncoderBackwardPlannedCuda", plan.n, C));
  if (plan.n_chunks == 0) return Status::Ok();
  if (size_t(plan.n_slots) * size_t(C) > scratch_floats) {
    return InvalidArgument("EncoderBackwardPlannedCuda: scratch of " +
                           std::to_string(scratch_floats) + " floats, need " +
                           std::to_string(size_t(plan.n_slots) * size_t(C)));
  }
  const int32_t* rows = d_data;
  const int32_t* chunk_begin = rows + plan.n;
  const int32_t* chunk_token = chunk_begin + plan.n_chunks + 1;
  const int32_t* chunk_slot = chunk_token + plan.n_chunks;
  const int32_t* multi_token = chunk_slot + plan.n_chunks;
  const int32_t* multi_begin = multi_token + plan.n_multi;
  const bool vec = C % 4 == 0 && (reinterpret_cast<uintptr_t>(dwte) & 15) == 0 &&
                   (reinterpret_cast<uintptr_t>(dout) & 15) == 0 &&
                   (reinterpret_cast<uintptr_t>(scratch) & 15) == 0;
  const int cols = vec ? C / 4 : C;
  const int threads = std::min(256, ((cols + 31) / 32) * 32);
  if (vec) {
    EncoderChunkKernel<true><<<plan.n_chunks, threads, 0, stream>>>(
        dwte, scratch, dout, rows, chunk_begin, chunk_token, chunk_slot, C);
  } else {
    EncoderChunkKernel<false><<<plan.n_chunks, threads, 0, stream>>>(
        dwte, scratch, dout, rows, chunk_begin, chunk_token, chunk_slot, C);
  }
  if (plan.n_multi > 0) {
    EncoderMultiKernel<<<dim3(unsigned(plan.n_multi), unsigned((C + 255) / 256)), 256, 0,
                         stream>>>(dwte, scratch, multi_token, multi_begin, C);
  }
  return Launched("EncoderBackwardPlannedCuda");
}

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

template <typename Tin, typename Tqk, typename Tv>
Status QkvSplitForwardCuda(Tqk* q, Tqk* k, Tv* v, const Tin* qkv, int B, int Tn, int H, int D,
                           cudaStream_t stream) {
  ABLATE_RETURN_IF_ERROR(CheckSizes("QkvSplitForwardCuda", int64_t(B) * Tn, int64_t(H) * D));
  const int64_t total = int64_t(B) * Tn * 3 * H * D;
  if (total == 0) return Status::Ok();
  QkvSplitForwardKernel<Tin, Tqk, Tv><<<Blocks(total, 256), 256, 0, stream>>>(q, k, v, qkv, B, Tn, H, D);
  return Launched("QkvSplitForwardCuda");
}

template <typename Tqk, typename Tv, typename Tout>
Status QkvSplitBackwardCuda(Tout* dqkv, const Tqk* dq, const Tqk* dk, const Tv* dv, int B, int Tn,
                            int H, int D, cudaStream_t stream) {
  ABLATE_RETURN_IF_ERROR(CheckSizes("QkvSplitBackwardCuda", int64_t(B) * Tn, int64_t(H) * D));
  const int64_t total = int64_t(B) * Tn * 3 * H * D;
  if (total == 0) return Status::Ok();
  QkvSplitBackwardKernel<Tqk, Tv, Tout><<<Blocks(total, 256), 256, 0, stream>>>(dqkv, dq, dk, dv, B, Tn, H, D);
  return Launched("QkvSplitBackwardCuda");
}

// dst <- src permuted (B, H, Tn, D) -> (B, Tn, H, D) when kMerge, the inverse otherwise; by
// 16-byte vectors when D and both pointers allow.
template <bool kMerge, typename T>
Status HeadsPermuteCuda(const char* who, T* dst, const T* src, int B, int Tn, int H, int D,
                        cudaStream_t stream) {
  ABLATE_RETURN_IF_ERROR(CheckSizes(who, int64_t(B) * Tn, int64_t(H) * D));
  const int64_t total = int64_t(B) * Tn * H * D;
  if (total == 0) return Status::Ok();
  constexpr int kPer = 16 / sizeof(T);
  if (D % kPer == 0 && total < (int64_t(1) << 31) && Aligned16(dst) && Aligned16(src)) {
    const int total8 = int(total / kPer);
    uint4* d = reinterpret_cast<uint4*>(dst);
    const uint4* s = reinterpret_cast<const uint4*>(src);
    if constexpr (kMerge) {
      HeadsMergeForwardVecKernel<<<Blocks(total8, 256), 256, 0, stream>>>(d, s, Tn, H, D / kPer,
                                                                          total8);
    } else {
      HeadsMergeBackwardVecKernel<<<Blocks(total8, 256), 256, 0, stream>>>(d, s, Tn, H, D / kPer,
                                                                           total8);
    }
    return Launched(who);
  }
  if constexpr (kMerge) {
    HeadsMergeForwardKernel<T><<<Blocks(total, 256), 256, 0, stream>>>(dst, src, B, Tn, H, D);
  } else {
    HeadsMergeBackwardKernel<T><<<Blocks(total, 256), 256, 0, stream>>>(dst, src, B, Tn, H, D);
  }
  return Launched(who);
}

template <typename T>
Status HeadsMergeForwardCuda(T* out, const T* inp, int B, int Tn, int H, int D,
                             cudaStream_t stream) {
  return HeadsPermuteCuda<true>("HeadsMergeForwardCuda", out, inp, B, Tn, H, D, stream);
}

template <typename T>
Status HeadsMergeBackwardCuda(T* dinp, const T* dout, int B, int Tn, int H, int D,
                              cudaStream_t stream) {
  return HeadsPermuteCuda<false>("HeadsMergeBackwardCuda", dinp, dout, B, Tn, H, D, stream);
}

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
// Fused kernels (one pass where the unfused chain made several fp32 round trips).
namespace {

constexpr int kFusedThreads = 256;  // 8 warps
constexpr int kFusedWarps = kFusedThreads / 32;

// Blocks for a warp-per-row kernel whose per-block partials are reduced afterwards: enough to fill
// the GPU, few enough that the partials stay small.
int FusedBlocks(int64_t rows) {
  return int(std::max<int64_t>(
      1, std::min<int64_t>(512, (rows + 2 * kFusedWarps - 1) / (2 * kFusedWarps))));
}

// One warp per row; lane j holds columns lane + 32 * i (i < K). Every load of a row is issued
// before its reduction (one memory round trip per row), the dweight accumulators live in shared
// memory (each warp its own row of them, so registers stay at 3K and occupancy up), the gains come
// through the read-only cache. Fixed rows per warp, fixed warp order in the block reduction:
// deterministic.
template <int K>
__global__ void __launch_bounds__(kFusedThreads)
    RmsNormBackwardFusedKernel(float* dinp, bf16* dinp_bf, bool accumulate, float* partial,
                               const float* dout, const float* inp, const float* weight,
                               const float* rstd, int64_t N, int C) {
  extern __shared__ float sh[];  // (kFusedWarps, C)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* acc = sh + warp * C;
  for (int c = lane; c < C; c += 32) acc[c] = 0.f;
  for (int64_t row = int64_t(blockIdx.x) * kFusedWarps + warp; row < N;
       row += int64_t(gridDim.x) * kFusedWarps) {
    const float* dy = dout + row * C;
    const float* x = inp + row * C;
    float* dx = dinp + row * C;
    float dyv[K], xv[K], dxv[K];
#pragma unroll
    for (int i = 0; i < K; ++i) {
      const int c = lane + 32 * i;
      const bool in = c < C;
      dyv[i] = in ? dy[c] : 0.f;
      xv[i] = in ? x[c] : 0.f;
      dxv[i] = in && accumulate ? dx[c] : 0.f;
    }
    const float rs = rstd[row];
    float dot = 0.f;
#pragma unroll
    for (int i = 0; i < K; ++i) {
      const int c = lane + 32 * i;
      if (c < C) dot += __ldg(weight + c) * dyv[i] * xv[i];
    }
    dot = WarpSum(dot);
    const float k = rs * rs * rs * dot / float(C);
#pragma unroll
    for (int i = 0; i < K; ++i) {
      const int c = lane + 32 * i;
      if (c < C) {
        float g = rs * __ldg(weight + c) * dyv[i] - k * xv[i];
        if (accumulate) g += dxv[i];
        dx[c] = g;
        if (dinp_bf != nullptr) dinp_bf[row * C + c] = __float2bfloat16_rn(g);
        acc[c] += dyv[i] * xv[i] * rs;
      }
    }
  }
  __syncthreads();
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float s = 0.f;
    for (int w = 0; w < kFusedWarps; ++w) s += sh[w * C + c];
    partial[int64_t(blockIdx.x) * C + c] = s;
  }
}

// out[c] += sum over p of partial[p * ld + c], c < n, in a fixed order: block = 32 columns x 8
// lanes of p; each lane sums p = lane, lane + 8, ... (coalesced rows), then the 8 in order.
__global__ void SumPartialsColumnsKernel(float* out, const float* partial, int P, int ld, int n) {
  __shared__ float sh[8][33];
  const int cx = threadIdx.x % 32, py = threadIdx.x / 32;
  const int c = blockIdx.x * 32 + cx;
  float acc = 0.f;
  if (c < n) {
    for (int p = py; p < P; p += 8) acc += partial[int64_t(p) * ld + c];
  }
  sh[py][cx] = acc;
  __syncthreads();
  if (py == 0 && c < n) {
    float t = 0.f;
    for (int w = 0; w < 8; ++w) t += sh[w][cx];
    out[c] += t;
  }
}

void SumPartialsColumns(float* out, const float* partial, int P, int ld, int n,
                        cudaStream_t stream) {
  SumPartialsColumnsKernel<<<unsigned((n + 31) / 32), 256, 0, stream>>>(out, partial, P, ld, n);
}

constexpr int kRopeMaxPairs = 4;  // pairs per lane: D / 2 <= 128

constexpr int kVMax = 2 * kRopeMaxPairs;  // v values per lane

// One warp per (b, t, h): q, k and v of one head at one position. Every load (q, k, v, the RoPE
// tables, the gains) is issued before any reduction, so a warp waits for memory once.
__global__ void __launch_bounds__(kFusedThreads)
    QkvNormRopeForwardKernel(bf16* q, bf16* k, bf16* v, float* q_rstd, float* k_rstd,
                             const bf16* qkv, const float* q_gain, const float* k_gain,
                             const float* cs, const float* sn, int B, int Tn, int H, int D) {
  const int64_t rows = int64_t(B) * Tn * H;
  const int64_t row = int64_t(blockIdx.x) * kFusedWarps + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x % 32;
  const int h = int(row % H);
  const int64_t bt = row / H;
  const int t = int(bt % Tn);
  const int64_t b = bt / Tn;
  const int64_t C = int64_t(H) * D;
  const int half = D / 2;
  const bool norm = q_gain != nullptr;
  const bf16* src = qkv + bt * 3 * C + int64_t(h) * D;
  const int64_t dst_row = (b * H + h) * Tn + t;
  const int64_t dst = dst_row * D;
  float xa[2][kRopeMaxPairs], xb[2][kRopeMaxPairs], ga[2][kRopeMaxPairs], gb[2][kRopeMaxPairs];
  float c[kRopeMaxPairs], s[kRopeMaxPairs];
  bf16 vv[kVMax];
#pragma unroll
  for (int j = 0; j < kRopeMaxPairs; ++j) {
    const int i = lane + 32 * j;
    const bool in = i < half;
#pragma unroll
    for (int w = 0; w < 2; ++w) {
      xa[w][j] = in ? ToF(src[w * C + i]) : 0.f;
      xb[w][j] = in ? ToF(src[w * C + i + half]) : 0.f;
      const float* gain = w == 0 ? q_gain : k_gain;
      ga[w][j] = in && norm ? __ldg(gain + i) : 1.f;
      gb[w][j] = in && norm ? __ldg(gain + i + half) : 1.f;
    }
    c[j] = in ? __ldg(cs + int64_t(t) * half + i) : 0.f;
    s[j] = in ? __ldg(sn + int64_t(t) * half + i) : 0.f;
  }
#pragma unroll
  for (int j = 0; j < kVMax; ++j) {
    const int d = lane + 32 * j;
    if (d < D) vv[j] = src[2 * C + d];
  }
#pragma unroll
  for (int j = 0; j < kVMax; ++j) {
    const int d = lane + 32 * j;
    if (d < D) v[dst + d] = vv[j];
  }
#pragma unroll
  for (int w = 0; w < 2; ++w) {
    float rs = 1.f;
    if (norm) {
      float ss = 0.f;
#pragma unroll
      for (int j = 0; j < kRopeMaxPairs; ++j) ss += xa[w][j] * xa[w][j] + xb[w][j] * xb[w][j];
      ss = WarpSum(ss);
      rs = 1.0f / sqrtf(ss / float(D) + kEps);
      if (lane == 0) (w == 0 ? q_rstd : k_rstd)[dst_row] = rs;
    }
    bf16* out = w == 0 ? q : k;
#pragma unroll
    for (int j = 0; j < kRopeMaxPairs; ++j) {
      const int i = lane + 32 * j;
      if (i < half) {
        // Without QK-norm the gains are 1 and rs is 1: the values pass through unchanged.
        const float a = norm ? xa[w][j] * rs * ga[w][j] : xa[w][j];
        const float bb = norm ? xb[w][j] * rs * gb[w][j] : xb[w][j];
        out[dst + i] = __float2bfloat16_rn(a * c[j] - bb * s[j]);
        out[dst + i + half] = __float2bfloat16_rn(a * s[j] + bb * c[j]);
      }
    }
  }
}

// One warp per (b, t, h), a fixed set of rows per warp; gain partials per block (q then k). Every
// load of a row is issued before its reductions.
__global__ void __launch_bounds__(kFusedThreads)
    QkvNormRopeBackwardKernel(bf16* dqkv, float* partial, const bf16* dq, const bf16* dk,
                              const bf16* dv, const bf16* qkv, const float* q_gain,
                              const float* k_gain, const float* q_rstd, const float* k_rstd,
                              const float* cs, const float* sn, int B, int Tn, int H, int D) {
  extern __shared__ float sh[];  // (kFusedWarps, 2, D): each warp's own gain accumulators
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t rows = int64_t(B) * Tn * H;
  const int64_t C = int64_t(H) * D;
  const int half = D / 2;
  const bool norm = q_gain != nullptr;
  float* acc = sh + warp * 2 * D;
  if (norm) {
    for (int i = lane; i < 2 * D; i += 32) acc[i] = 0.f;
  }
  float wa[2][kRopeMaxPairs], wb[2][kRopeMaxPairs];  // the gains, loaded once
#pragma unroll
  for (int j = 0; j < kRopeMaxPairs; ++j) {
    const int i = lane + 32 * j;
#pragma unroll
    for (int w = 0; w < 2; ++w) {
      const float* gain = w == 0 ? q_gain : k_gain;
      wa[w][j] = i < half && norm ? gain[i] : 0.f;
      wb[w][j] = i < half && norm ? gain[i + half] : 0.f;
    }
  }
  for (int64_t row = int64_t(blockIdx.x) * kFusedWarps + warp; row < rows;
       row += int64_t(gridDim.x) * kFusedWarps) {
    const int h = int(row % H);
    const int64_t bt = row / H;
    const int t = int(bt % Tn);
    const int64_t b = bt / Tn;
    const int64_t src_row = (b * H + h) * Tn + t;
    const int64_t src = src_row * D;
    const bf16* x = qkv + bt * 3 * C + int64_t(h) * D;
    bf16* out = dqkv + bt * 3 * C + int64_t(h) * D;
    float u[2][kRopeMaxPairs], z[2][kRopeMaxPairs], xa[2][kRopeMaxPairs], xb[2][kRopeMaxPairs];
    float c[kRopeMaxPairs], s[kRopeMaxPairs];
    bf16 vv[kVMax];
#pragma unroll
    for (int j = 0; j < kRopeMaxPairs; ++j) {
      const int i = lane + 32 * j;
      const bool in = i < half;
#pragma unroll
      for (int w = 0; w < 2; ++w) {
        const bf16* g = w == 0 ? dq : dk;
        u[w][j] = in ? ToF(g[src + i]) : 0.f;
        z[w][j] = in ? ToF(g[src + i + half]) : 0.f;
        xa[w][j] = in && norm ? ToF(x[w * C + i]) : 0.f;
        xb[w][j] = in && norm ? ToF(x[w * C + i + half]) : 0.f;
      }
      c[j] = in ? __ldg(cs + int64_t(t) * half + i) : 0.f;
      s[j] = in ? __ldg(sn + int64_t(t) * half + i) : 0.f;
    }
#pragma unroll
    for (int j = 0; j < kVMax; ++j) {
      const int d = lane + 32 * j;
      if (d < D) vv[j] = dv[src + d];
    }
    float rs[2] = {1.f, 1.f};
    if (norm) {
      rs[0] = q_rstd[src_row];
      rs[1] = k_rstd[src_row];
    }
#pragma unroll
    for (int j = 0; j < kVMax; ++j) {
      const int d = lane + 32 * j;
      if (d < D) out[2 * C + d] = vv[j];
    }
#pragma unroll
    for (int w = 0; w < 2; ++w) {
      float ga[kRopeMaxPairs], gb[kRopeMaxPairs];
      float dot = 0.f;
#pragma unroll
      for (int j = 0; j < kRopeMaxPairs; ++j) {
        ga[j] = u[w][j] * c[j] + z[w][j] * s[j];  // R^T
        gb[j] = z[w][j] * c[j] - u[w][j] * s[j];
        dot += wa[w][j] * ga[j] * xa[w][j] + wb[w][j] * gb[j] * xb[w][j];
      }
      bf16* o = out + w * C;
      if (norm) {
        dot = WarpSum(dot);
        const float r = rs[w];
        const float kk = r * r * r * dot / float(D);
#pragma unroll
        for (int j = 0; j < kRopeMaxPairs; ++j) {
          const int i = lane + 32 * j;
          if (i < half) {
            o[i] = __float2bfloat16_rn(r * wa[w][j] * ga[j] - kk * xa[w][j]);
            o[i + half] = __float2bfloat16_rn(r * wb[w][j] * gb[j] - kk * xb[w][j]);
            acc[w * D + i] += ga[j] * xa[w][j] * r;
            acc[w * D + i + half] += gb[j] * xb[w][j] * r;
          }
        }
      } else {
#pragma unroll
        for (int j = 0; j < kRopeMaxPairs; ++j) {
          const int i = lane + 32 * j;
          if (i < half) {
            o[i] = __float2bfloat16_rn(ga[j]);
            o[i + half] = __float2bfloat16_rn(gb[j]);
          }
        }
      }
    }
  }
  if (!norm) return;
  __syncthreads();
  for (int c = threadIdx.x; c < 2 * D; c += blockDim.x) {
    float t = 0.f;
    for (int w = 0; w < kFusedWarps; ++w) t += sh[w * 2 * D + c];
    partial[int64_t(blockIdx.x) * 2 * D + c] = t;
  }
}


// Vectorized QKV kernels for D in {8, 16, ..., 256} (D / 8 a power of two): L = D / 8 lanes per
// (b, t, h) row, so one warp holds 32 / L rows. Lane l owns the rotary pairs 4l .. 4l + 3 (8-byte
// loads of q and k at 4l and D/2 + 4l, float4 loads of the RoPE tables) and v's values 8l .. 8l + 7
// (one 16-byte load). The per-element arithmetic is the scalar kernels'; only the order of the
// row reductions differs. The scalar kernels (2-byte accesses, one row per warp) were 3-5x above
// the memory bound at D = 64; these keep every access 8 or 16 bytes wide.
__device__ __forceinline__ void LoadBf4(const bf16* p, float (&f)[4]) {
  const uint2 u = *reinterpret_cast<const uint2*>(p);
  const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.x));
  const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.y));
  f[0] = a.x;
  f[1] = a.y;
  f[2] = b.x;
  f[3] = b.y;
}

__device__ __forceinline__ void StoreBf4(bf16* p, const float (&f)[4]) {
  const __nv_bfloat162 a = __floats2bfloat162_rn(f[0], f[1]);
  const __nv_bfloat162 b = __floats2bfloat162_rn(f[2], f[3]);
  uint2 u;
  u.x = *reinterpret_cast<const uint32_t*>(&a);
  u.y = *reinterpret_cast<const uint32_t*>(&b);
  *reinterpret_cast<uint2*>(p) = u;
}

template <int L>
__device__ __forceinline__ float GroupSum(float v) {
#pragma unroll
  for (int o = L / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Blocks of the vectorized forward: enough to fill the GPU several times; the gains are loaded once
// per thread, so a few rows per group are worth it.
int QkvVecForwardBlocks(int64_t rows, int L) {
  const int64_t per_block = int64_t(kFusedWarps) * (32 / L);
  return int(std::max<int64_t>(1, std::min<int64_t>(4096, (rows + per_block - 1) / per_block)));
}

// One (b, t, h) row of the vectorized forward for the L lanes of group `grp` (lane l of it):
// loads q, k, v of the row from qkv, writes q, k (normed, rotated), v and the rstds when `valid`.
// kRounded: k's outputs as stored (bf16-rounded) also come back in ka / kb (pairs 4l .. 4l + 3 and
// D/2 + 4l ..), for the K-mean sums. Every lane of the warp must call it (group shuffles).
template <int L, bool kRounded>
__device__ __forceinline__ void QkvNormRopeRowVec(bf16* q, bf16* k, bf16* v, float* q_rstd,
                                                  float* k_rstd, const bf16* qkv, bool norm,
                                                  const float (&ga)[2][4], const float (&gb)[2][4],
                                                  const float* cs, const float* sn, int64_t b,
                                                  int t, int h, int Tn, int H, bool valid, int l,
                                                  float (&ka)[4], float (&kb)[4]) {
  constexpr int D = 8 * L, half = 4 * L;
  const int64_t C = int64_t(H) * D;
  const int64_t bt = b * Tn + t;
  const bf16* src = qkv + bt * 3 * C + int64_t(h) * D;
  const int64_t dst_row = (b * H + h) * Tn + t;
  const int64_t dst = dst_row * D;
  float xa[2][4], xb[2][4];
  LoadBf4(src + 4 * l, xa[0]);
  LoadBf4(src + half + 4 * l, xb[0]);
  LoadBf4(src + C + 4 * l, xa[1]);
  LoadBf4(src + C + half + 4 * l, xb[1]);
  const uint4 vv = *reinterpret_cast<const uint4*>(src + 2 * C + 8 * l);
  const float4 c4 = __ldg(reinterpret_cast<const float4*>(cs + int64_t(t) * half + 4 * l));
  const float4 s4 = __ldg(reinterpret_cast<const float4*>(sn + int64_t(t) * half + 4 * l));
  const float c[4] = {c4.x, c4.y, c4.z, c4.w};
  const float s[4] = {s4.x, s4.y, s4.z, s4.w};
  if (valid) *reinterpret_cast<uint4*>(v + dst + 8 * l) = vv;
#pragma unroll
  for (int w = 0; w < 2; ++w) {
    float rs = 1.f;
    if (norm) {
      float ss = 0.f;
#pragma unroll
      for (int j = 0; j < 4; ++j) ss += xa[w][j] * xa[w][j] + xb[w][j] * xb[w][j];
      ss = GroupSum<L>(ss);
      rs = 1.0f / sqrtf(ss / float(D) + kEps);
      if (valid && l == 0) (w == 0 ? q_rstd : k_rstd)[dst_row] = rs;
    }
    float oa[4], ob[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float a = norm ? xa[w][j] * rs * ga[w][j] : xa[w][j];
      const float bb = norm ? xb[w][j] * rs * gb[w][j] : xb[w][j];
      oa[j] = a * c[j] - bb * s[j];
      ob[j] = a * s[j] + bb * c[j];
    }
    if (valid) {
      bf16* out = w == 0 ? q : k;
      StoreBf4(out + dst + 4 * l, oa);
      StoreBf4(out + dst + half + 4 * l, ob);
    }
    if (kRounded && w == 1) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        ka[j] = __bfloat162float(__float2bfloat16_rn(oa[j]));
        kb[j] = __bfloat162float(__float2bfloat16_rn(ob[j]));
      }
    }
  }
}

// The gains of lane l's pairs (1 without QK-norm).
template <int L>
__device__ __forceinline__ void LoadRopeGains(const float* q_gain, const float* k_gain, int l,
                                              float (&ga)[2][4], float (&gb)[2][4]) {
  constexpr int half = 4 * L;
  const bool norm = q_gain != nullptr;
#pragma unroll
  for (int w = 0; w < 2; ++w) {
    const float* gain = w == 0 ? q_gain : k_gain;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      ga[w][j] = norm ? __ldg(gain + 4 * l + j) : 1.f;
      gb[w][j] = norm ? __ldg(gain + half + 4 * l + j) : 1.f;
    }
  }
}

template <int L>
__global__ void __launch_bounds__(kFusedThreads)
    QkvNormRopeForwardVecKernel(bf16* q, bf16* k, bf16* v, float* q_rstd, float* k_rstd,
                                const bf16* qkv, const float* q_gain, const float* k_gain,
                                const float* cs, const float* sn, int B, int Tn, int H) {
  constexpr int G = 32 / L;
  const int64_t rows = int64_t(B) * Tn * H;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int l = lane % L, grp = lane / L;
  float ga[2][4], gb[2][4], ka[4], kb[4];
  LoadRopeGains<L>(q_gain, k_gain, l, ga, gb);
  // The loop bound is the warp's first row, so every lane of a warp runs the same iterations (the
  // group sums shuffle across the whole warp); rows past the end load row rows-1 and store nothing.
  for (int64_t wrow = (int64_t(blockIdx.x) * kFusedWarps + warp) * G; wrow < rows;
       wrow += int64_t(gridDim.x) * kFusedWarps * G) {
    const int64_t row = wrow + grp;
    const bool valid = row < rows;
    const int64_t r = valid ? row : rows - 1;
    const int h = int(r % H);
    const int64_t bt = r / H;
    QkvNormRopeRowVec<L, false>(q, k, v, q_rstd, k_rstd, qkv, q_gain != nullptr, ga, gb, cs, sn,
                                bt / Tn, int(bt % Tn), h, Tn, H, valid, l, ka, kb);
  }
}

// The same rows with the K mean's partial sums (SageBwd's K-smoothing): block (p, BH - 1 - bh)
// does tokens [p R, min(Tn, (p + 1) R)) of head bh = b H + h, group g (of kFusedThreads / L)
// tokens g, g + groups, ...; each lane sums its k outputs as stored (bf16) in double, the groups
// are added in a fixed order: k_sums[(bh P + p) D + d] (P = gridDim.x parts). Deterministic.
template <int L>
__global__ void __launch_bounds__(kFusedThreads)
    QkvNormRopeForwardSumsKernel(bf16* q, bf16* k, bf16* v, float* q_rstd, float* k_rstd,
                                 double* k_sums, const bf16* qkv, const float* q_gain,
                                 const float* k_gain, const float* cs, const float* sn, int Tn,
                                 int H, int rows_per_part) {
  constexpr int D = 8 * L, half = 4 * L, kGroups = kFusedThreads / L;
  __shared__ double part[kGroups][D];
  const int l = threadIdx.x % L, grp = threadIdx.x / L;
  // Heads in descending order: the lowest heads' q, k, v are written last, so they are the ones
  // still in L2 when the quantization launch after this pass starts at head 0.
  const int bh = int(gridDim.y) - 1 - int(blockIdx.y), h = bh % H;
  const int64_t b = bh / H;
  const int t0 = blockIdx.x * rows_per_part, t1 = min(Tn, t0 + rows_per_part);
  float ga[2][4], gb[2][4], ka[4], kb[4];
  LoadRopeGains<L>(q_gain, k_gain, l, ga, gb);
  double sa[4] = {0.0, 0.0, 0.0, 0.0}, sb[4] = {0.0, 0.0, 0.0, 0.0};
  // The loop bound is the warp's first token (the group shuffles span the warp); tokens past t1
  // load token t1 - 1 and store nothing.
  constexpr int G = 32 / L;
  for (int tw = t0 + grp / G * G; tw < t1; tw += kGroups) {
    const int tt = tw + grp % G;
    const bool valid = tt < t1;
    QkvNormRopeRowVec<L, true>(q, k, v, q_rstd, k_rstd, qkv, q_gain != nullptr, ga, gb, cs, sn, b,
                               valid ? tt : t1 - 1, h, Tn, H, valid, l, ka, kb);
    if (valid) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        sa[j] += ka[j];
        sb[j] += kb[j];
      }
    }
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    part[grp][4 * l + j] = sa[j];
    part[grp][half + 4 * l + j] = sb[j];
  }
  __syncthreads();
  for (int d = threadIdx.x; d < D; d += kFusedThreads) {
    double s = 0.0;
    for (int g = 0; g < kGroups; ++g) s += part[g][d];
    k_sums[(int64_t(bh) * gridDim.x + blockIdx.x) * D + d] = s;
  }
}

// Gain partials per block (P, 2, D) as the scalar kernel's: each group accumulates its rows in
// registers, then the block sums its groups in a fixed order.
template <int L>
__global__ void __launch_bounds__(kFusedThreads)
    QkvNormRopeBackwardVecKernel(bf16* dqkv, float* partial, const bf16* dq, const bf16* dk,
                                 const bf16* dv, const bf16* qkv, const float* q_gain,
                                 const float* k_gain, const float* q_rstd, const float* k_rstd,
                                 const float* cs, const float* sn, int B, int Tn, int H) {
  constexpr int D = 8 * L, half = 4 * L, G = 32 / L;
  extern __shared__ float sh[];  // (kFusedThreads / L groups, 2, D)
  const int64_t rows = int64_t(B) * Tn * H;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int l = lane % L, grp = lane / L;
  const int64_t C = int64_t(H) * D;
  const bool norm = q_gain != nullptr;
  float wa[2][4], wb[2][4], acc_a[2][4], acc_b[2][4];
#pragma unroll
  for (int w = 0; w < 2; ++w) {
    const float* gain = w == 0 ? q_gain : k_gain;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      wa[w][j] = norm ? __ldg(gain + 4 * l + j) : 0.f;
      wb[w][j] = norm ? __ldg(gain + half + 4 * l + j) : 0.f;
      acc_a[w][j] = 0.f;
      acc_b[w][j] = 0.f;
    }
  }
  for (int64_t wrow = (int64_t(blockIdx.x) * kFusedWarps + warp) * G; wrow < rows;
       wrow += int64_t(gridDim.x) * kFusedWarps * G) {
    const int64_t row = wrow + grp;
    const bool valid = row < rows;
    const int64_t r = valid ? row : rows - 1;
    const int h = int(r % H);
    const int64_t bt = r / H;
    const int t = int(bt % Tn);
    const int64_t b = bt / Tn;
    const int64_t src_row = (b * H + h) * Tn + t;
    const int64_t src = src_row * D;
    const bf16* x = qkv + bt * 3 * C + int64_t(h) * D;
    bf16* out = dqkv + bt * 3 * C + int64_t(h) * D;
    float u[2][4], z[2][4], xa[2][4], xb[2][4];
    LoadBf4(dq + src + 4 * l, u[0]);
    LoadBf4(dq + src + half + 4 * l, z[0]);
    LoadBf4(dk + src + 4 * l, u[1]);
    LoadBf4(dk + src + half + 4 * l, z[1]);
    if (norm) {
      LoadBf4(x + 4 * l, xa[0]);
      LoadBf4(x + half + 4 * l, xb[0]);
      LoadBf4(x + C + 4 * l, xa[1]);
      LoadBf4(x + C + half + 4 * l, xb[1]);
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) xa[0][j] = xb[0][j] = xa[1][j] = xb[1][j] = 0.f;
    }
    const uint4 vv = *reinterpret_cast<const uint4*>(dv + src + 8 * l);
    const float4 c4 = __ldg(reinterpret_cast<const float4*>(cs + int64_t(t) * half + 4 * l));
    const float4 s4 = __ldg(reinterpret_cast<const float4*>(sn + int64_t(t) * half + 4 * l));
    const float c[4] = {c4.x, c4.y, c4.z, c4.w};
    const float s[4] = {s4.x, s4.y, s4.z, s4.w};
    float rs[2] = {1.f, 1.f};
    if (norm) {
      rs[0] = q_rstd[src_row];
      rs[1] = k_rstd[src_row];
    }
    if (valid) *reinterpret_cast<uint4*>(out + 2 * C + 8 * l) = vv;
#pragma unroll
    for (int w = 0; w < 2; ++w) {
      float ga[4], gb[4], oa[4], ob[4];
      float dot = 0.f;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        ga[j] = u[w][j] * c[j] + z[w][j] * s[j];  // R^T
        gb[j] = z[w][j] * c[j] - u[w][j] * s[j];
        dot += wa[w][j] * ga[j] * xa[w][j] + wb[w][j] * gb[j] * xb[w][j];
      }
      if (norm) {
        dot = GroupSum<L>(dot);
        const float rr = rs[w];
        const float kk = rr * rr * rr * dot / float(D);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          oa[j] = rr * wa[w][j] * ga[j] - kk * xa[w][j];
          ob[j] = rr * wb[w][j] * gb[j] - kk * xb[w][j];
          if (valid) {
            acc_a[w][j] += ga[j] * xa[w][j] * rr;
            acc_b[w][j] += gb[j] * xb[w][j] * rr;
          }
        }
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          oa[j] = ga[j];
          ob[j] = gb[j];
        }
      }
      if (valid) {
        StoreBf4(out + w * C + 4 * l, oa);
        StoreBf4(out + w * C + half + 4 * l, ob);
      }
    }
  }
  if (!norm) return;
  float* mine = sh + (threadIdx.x / L) * 2 * D;
#pragma unroll
  for (int w = 0; w < 2; ++w) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      mine[w * D + 4 * l + j] = acc_a[w][j];
      mine[w * D + half + 4 * l + j] = acc_b[w][j];
    }
  }
  __syncthreads();
  constexpr int kGroups = kFusedThreads / L;
  for (int i = threadIdx.x; i < 2 * D; i += blockDim.x) {
    float tot = 0.f;
    for (int g = 0; g < kGroups; ++g) tot += sh[g * 2 * D + i];
    partial[int64_t(blockIdx.x) * 2 * D + i] = tot;
  }
}

// L for the vectorized kernels, or 0 when D or a pointer does not allow them.
int QkvVecLanes(int D, std::initializer_list<const void*> ptrs) {
  if (D % 8 != 0) return 0;
  const int L = D / 8;
  if (L > 32 || (L & (L - 1)) != 0) return 0;
  for (const void* p : ptrs)
    if (p != nullptr && !Aligned16(p)) return 0;
  return L;
}

template <typename F>
void DispatchLanes(int L, F&& f) {
  switch (L) {
    case 1: f(std::integral_constant<int, 1>()); break;
    case 2: f(std::integral_constant<int, 2>()); break;
    case 4: f(std::integral_constant<int, 4>()); break;
    case 8: f(std::integral_constant<int, 8>()); break;
    case 16: f(std::integral_constant<int, 16>()); break;
    case 32: f(std::integral_constant<int, 32>()); break;
    default: break;
  }
}
}  // namespace

size_t RmsNormBackwardFusedScratch(int64_t N, int C) {
  return size_t(FusedBlocks(N)) * size_t(std::max(C, 1));
}

Status RmsNormBackwardFusedCuda(float* dinp, bf16* dinp_bf, bool accumulate, float* dweight,
                                const float* dout, const float* inp, const float* weight,
                                const float* rstd, int64_t N, int C, float* scratch,
                                size_t scratch_floats, cudaStream_t stream) {
  ABLATE_RETURN_IF_ERROR(CheckSizes("RmsNormBackwardFusedCuda", N, C));
  if (C > 1024) {
    return InvalidArgument("RmsNormBackwardFusedCuda: C = " + std::to_string(C) +
                           " exceeds 1024 (use RmsNormBackwardCuda)");
  }
  if (scratch_floats < RmsNormBackwardFusedScratch(N, C)) {
    return InvalidArgument("RmsNormBackwardFusedCuda: scratch of " +
                           std::to_string(scratch_floats) + " floats, need " +
                           std::to_string(RmsNormBackwardFusedScratch(N, C)));
  }
  if (N == 0) return Status::Ok();
  const int P = FusedBlocks(N);
  const size_t smem = size_t(kFusedWarps) * C * sizeof(float);
  if (C <= 256) {
    RmsNormBackwardFusedKernel<8><<<P, kFusedThreads, smem, stream>>>(
        dinp, dinp_bf, accumulate, scratch, dout, inp, weight, rstd, N, C);
  } else if (C <= 512) {
    RmsNormBackwardFusedKernel<16><<<P, kFusedThreads, smem, stream>>>(
        dinp, dinp_bf, accumulate, scratch, dout, inp, weight, rstd, N, C);
  } else if (C <= 768) {
    RmsNormBackwardFusedKernel<24><<<P, kFusedThreads, smem, stream>>>(
        dinp, dinp_bf, accumulate, scratch, dout, inp, weight, rstd, N, C);
  } else {
    RmsNormBackwardFusedKernel<32><<<P, kFusedThreads, smem, stream>>>(
        dinp, dinp_bf, accumulate, scratch, dout, inp, weight, rstd, N, C);
  }
  SumPartialsColumns(dweight, scratch, P, C, C, stream);
  return Launched("RmsNormBackwardFusedCuda");
}

namespace {
Status CheckQkvNormRope(const char* what, int B, int Tn, int H, int D) {
  ABLATE_RETURN_IF_ERROR(CheckSizes(what, int64_t(B) * Tn * H, D));
  if (D % 2 != 0 || D > 2 * 32 * kRopeMaxPairs) {
    return InvalidArgument(std::string(what) + ": head size D must be even and <= " +
                           std::to_string(2 * 32 * kRopeMaxPairs) + ", got " + std::to_string(D));
  }
  return Status::Ok();
}
}  // namespace

Status QkvNormRopeForwardCuda(bf16* q, bf16* k, bf16* v, float* q_rstd, float* k_rstd,
                              const bf16* qkv, const float* q_gain, const float* k_gain,
                              const float* cos, const float* sin, int B, int Tn, int H, int D,
                              cudaStream_t stream, double* k_sums, int k_rows_per_part) {
  ABLATE_RETURN_IF_ERROR(CheckQkvNormRope("QkvNormRopeForwardCuda", B, Tn, H, D));
  if ((q_gain == nullptr) != (k_gain == nullptr)) {
    return InvalidArgument("QkvNormRopeForwardCuda: q_gain and k_gain must both be set or null");
  }
  const int64_t rows = int64_t(B) * Tn * H;
  if (rows == 0) return Status::Ok();
  const int L = QkvVecLanes(D, {q, k, v, qkv, cos, sin});
  if (k_sums != nullptr) {
    if (k_rows_per_part < 1) {
      return InvalidArgument("QkvNormRopeForwardCuda: k_rows_per_part must be >= 1, got " +
                             std::to_string(k_rows_per_part));
    }
    if (L == 0) {
      return InvalidArgument("QkvNormRopeForwardCuda: k_sums need the vectorized kernel (D / 8 a "
                             "power of two, 16-byte aligned buffers), got D = " +
                             std::to_string(D));
    }
    const int parts = (Tn + k_rows_per_part - 1) / k_rows_per_part;
    if (int64_t(B) * H > 65535) {
      return InvalidArgument("QkvNormRopeForwardCuda: k_sums with B * H > 65535");
    }
    DispatchLanes(L, [&](auto lanes) {
      constexpr int kL = decltype(lanes)::value;
      QkvNormRopeForwardSumsKernel<kL><<<dim3(parts, B * H), kFusedThreads, 0, stream>>>(
          q, k, v, q_rstd, k_rstd, k_sums, qkv, q_gain, k_gain, cos, sin, Tn, H, k_rows_per_part);
    });
    return Launched("QkvNormRopeForwardCuda (k sums)");
  }
  if (L > 0) {
    DispatchLanes(L, [&](auto lanes) {
      constexpr int kL = decltype(lanes)::value;
      QkvNormRopeForwardVecKernel<kL><<<QkvVecForwardBlocks(rows, kL), kFusedThreads, 0, stream>>>(
          q, k, v, q_rstd, k_rstd, qkv, q_gain, k_gain, cos, sin, B, Tn, H);
    });
  } else {
    QkvNormRopeForwardKernel<<<Blocks(rows, kFusedWarps), kFusedThreads, 0, stream>>>(
        q, k, v, q_rstd, k_rstd, qkv, q_gain, k_gain, cos, sin, B, Tn, H, D);
  }
  return Launched("QkvNormRopeForwardCuda");
}

size_t QkvNormRopeBackwardScratch(int B, int Tn, int H, int D) {
  return size_t(FusedBlocks(int64_t(B) * Tn * H)) * 2 * size_t(std::max(D, 1));
}

Status QkvNormRopeBackwardCuda(bf16* dqkv, float* dq_gain, float* dk_gain, const bf16* dq,
                               const bf16* dk, const bf16* dv, const bf16* qkv, const float* q_gain,
                               const float* k_gain, const float* q_rstd, const float* k_rstd,
                               const float* cos, const float* sin, int B, int Tn, int H, int D,
                               float* scratch, size_t scratch_floats, cudaStream_t stream) {
  ABLATE_RETURN_IF_ERROR(CheckQkvNormRope("QkvNormRopeBackwardCuda", B, Tn, H, D));
  const bool norm = q_gain != nullptr;
  if (norm != (k_gain != nullptr) || norm != (dq_gain != nullptr) || norm != (dk_gain != nullptr)) {
    return InvalidArgument(
        "QkvNormRopeBackwardCuda: q_gain, k_gain, dq_gain, dk_gain must all be set or all null");
  }
  if (norm && scratch_floats < QkvNormRopeBackwardScratch(B, Tn, H, D)) {
    return InvalidArgument("QkvNormRopeBackwardCuda: scratch of " + std::to_string(scratch_floats) +
                           " floats, need " +
                           std::to_string(QkvNormRopeBackwardScratch(B, Tn, H, D)));
  }
  const int64_t rows = int64_t(B) * Tn * H;
  if (rows == 0) return Status::Ok();
  const int P = FusedBlocks(rows);
  const int L = QkvVecLanes(D, {dqkv, dq, dk, dv, qkv, cos, sin});
  if (L > 0) {
    // (kFusedThreads / L) groups x 2 x (8 L) floats: the same 16 KiB for every L.
    const size_t smem = norm ? size_t(kFusedThreads) * 16 * sizeof(float) : 0;
    DispatchLanes(L, [&](auto lanes) {
      constexpr int kL = decltype(lanes)::value;
      QkvNormRopeBackwardVecKernel<kL><<<P, kFusedThreads, smem, stream>>>(
          dqkv, scratch, dq, dk, dv, qkv, q_gain, k_gain, q_rstd, k_rstd, cos, sin, B, Tn, H);
    });
  } else {
    const size_t smem = norm ? size_t(kFusedWarps) * 2 * D * sizeof(float) : 0;
    QkvNormRopeBackwardKernel<<<P, kFusedThreads, smem, stream>>>(
        dqkv, scratch, dq, dk, dv, qkv, q_gain, k_gain, q_rstd, k_rstd, cos, sin, B, Tn, H, D);
  }
  if (norm) {
    // partial is (P, 2, D): column c < D is q's gain, c >= D k's; sum q and k separately.
    SumPartialsColumns(dq_gain, scratch, P, 2 * D, D, stream);
    SumPartialsColumns(dk_gain, scratch + D, P, 2 * D, D, stream);
  }
  return Launched("QkvNormRopeBackwardCuda");
}

// ---------------------------------------------------------------------------------------------
// Instantiations (the combinations the header lists).
#define TWO_TYPES(F)   \
  F(float, float)      \
  F(float, bf16)       \
  F(bf16, float)       \
  F(bf16, bf16)

#define INST_RMS_FWD(A, B) \
  template Status RmsNormForwardCuda<A, B>(B*, float*, const A*, const float*, int64_t, int, cudaStream_t);
#define INST_RMS_BWD(A, B)                                                                        \
  template Status RmsNormBackwardCuda<A, B>(float*, bool, float*, const A*, const B*, const float*, \
                                            const float*, int64_t, int, float*, size_t, cudaStream_t);
#define INST_ROPE_FWD(A, B)                                                                      \
  template Status RopeForwardCuda<A, B>(B*, const A*, const float*, const float*, int64_t, int, int, \
                                        cudaStream_t);
#define INST_ACT_FWD(A, B)                                                            \
  template Status GeluForwardCuda<A, B>(B*, const A*, int64_t, cudaStream_t);         \
  template Status Relu2ForwardCuda<A, B>(B*, const A*, int64_t, cudaStream_t);
TWO_TYPES(INST_RMS_FWD)
TWO_TYPES(INST_RMS_BWD)
TWO_TYPES(INST_ROPE_FWD)
TWO_TYPES(INST_ACT_FWD)

#define ONE_TYPE(T)                                                                                \
  template Status RopeBackwardCuda<T>(float*, bool, const T*, const float*, const float*, int64_t, \
                                      int, int, cudaStream_t);                                     \
  template Status GeluBackwardCuda<T>(T*, bool, const T*, const T*, int64_t, cudaStream_t);        \
  template Status Relu2BackwardCuda<T>(T*, bool, const T*, const T*, int64_t, cudaStream_t);       \
  template Status SoftmaxCrossEntropyCuda<T>(float*, T*, const T*, const int32_t*, int64_t, int,   \
                                             float, cudaStream_t);                                 \
  template Status HeadsMergeForwardCuda<T>(T*, const T*, int, int, int, int, cudaStream_t);        \
  template Status HeadsMergeBackwardCuda<T>(T*, const T*, int, int, int, int, cudaStream_t);       \
  template Status CompareAccumulateCuda<T, T>(double*, const T*, const T*, int64_t, cudaStream_t);
ONE_TYPE(float)
ONE_TYPE(bf16)

template Status CastCuda<float, bf16>(bf16*, const float*, int64_t, cudaStream_t);
template Status CastCuda<bf16, float>(float*, const bf16*, int64_t, cudaStream_t);
template Status CastCuda<float, float>(float*, const float*, int64_t, cudaStream_t);

template Status QkvSplitForwardCuda<float, float, bf16>(float*, float*, bf16*, const float*, int, int,
                                                        int, int, cudaStream_t);
template Status QkvSplitForwardCuda<float, bf16, bf16>(bf16*, bf16*, bf16*, const float*, int, int,
                                                       int, int, cudaStream_t);
template Status QkvSplitForwardCuda<float, float, float>(float*, float*, float*, const float*, int,
                                                         int, int, int, cudaStream_t);
template Status QkvSplitBackwardCuda<float, bf16, bf16>(bf16*, const float*, const float*,
                                                        const bf16*, int, int, int, int,
                                                        cudaStream_t);
template Status QkvSplitBackwardCuda<float, float, float>(float*, const float*, const float*,
                                                          const float*, int, int, int, int,
                                                          cudaStream_t);
template Status QkvSplitBackwardCuda<bf16, bf16, bf16>(bf16*, const bf16*, const bf16*,
                                                       const bf16*, int, int, int, int,
                                                       cudaStream_t);

}  // namespace ablate::kernels::cuda
