// Device layers: see layers_cuda.h for the contract of every function.
#include "layers/cuda/layers_cuda.h"

#include <algorithm>
#include <cmath>
#include <string>

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
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return Internal(std::string(what) + ": launch failed: " + cudaGetErrorString(e));
  return Status::Ok();
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
  if (threadIdx.x == 0) ztgt_shared = ToF(z[tgt]);
  __syncthreads();
  if (threadIdx.x == 0) {
    float M = -INFINITY, S = 0.f;
    for (int w = 0; w < int(blockDim.x / 32); ++w) CombineMaxSum(M, S, sm[w], ss[w]);
    lse_shared = logf(S) + M;
    if (losses != nullptr) losses[r] = lse_shared - ztgt_shared;
  }
  __syncthreads();
  if (dlogits == nullptr) return;
  const float lse = lse_shared;
  T* dz = dlogits + r * V;
  for (int j = threadIdx.x; j < V; j += blockDim.x) {
    const float p = expf(ToF(z[j]) - lse);
    dz[j] = FromF<T>(dloss * (p - (j == tgt ? 1.0f : 0.0f)));
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
template <typename Tin, typename Tqk, typename Tv>
__global__ void QkvSplitForwardKernel(Tqk* q, Tqk* k, Tv* v, const Tin* qkv, int B, int Tn, int H,
                                      int D) {
  const int64_t C = int64_t(H) * D;
  const int64_t total = int64_t(B) * Tn * 3 * C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t bt = i / (3 * C);
    const int64_t rem = i - bt * 3 * C;
    const int which = int(rem / C);
    const int64_t hc = rem - which * C;
    const int h = int(hc / D), d = int(hc - int64_t(h) * D);
    const int64_t b = bt / Tn, t = bt - b * Tn;
    const int64_t dst = ((b * H + h) * Tn + t) * D + d;
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
    const int64_t bt = i / (3 * C);
    const int64_t rem = i - bt * 3 * C;
    const int which = int(rem / C);
    const int64_t hc = rem - which * C;
    const int h = int(hc / D), d = int(hc - int64_t(h) * D);
    const int64_t b = bt / Tn, t = bt - b * Tn;
    const int64_t src = ((b * H + h) * Tn + t) * D + d;
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

template <typename Tin, typename Tout>
Status GeluForwardCuda(Tout* out, const Tin* inp, int64_t n, cudaStream_t stream) {
  ABLATE_RETURN_IF_ERROR(CheckSizes("GeluForwardCuda", n));
  if (n == 0) return Status::Ok();
  GeluForwardKernel<Tin, Tout><<<Blocks(n, 256), 256, 0, stream>>>(out, inp, n);
  return Launched("GeluForwardCuda");
}
template <typename Tin, typename Tout>
Status Relu2ForwardCuda(Tout* out, const Tin* inp, int64_t n, cudaStream_t stream) {
  ABLATE_RETURN_IF_ERROR(CheckSizes("Relu2ForwardCuda", n));
  if (n == 0) return Status::Ok();
  Relu2ForwardKernel<Tin, Tout><<<Blocks(n, 256), 256, 0, stream>>>(out, inp, n);
  return Launched("Relu2ForwardCuda");
}
template <typename T>
Status GeluBackwardCuda(T* dinp, bool accumulate, const T* inp, const T* dout, int64_t n,
                        cudaStream_t stream) {
  ABLATE_RETURN_IF_ERROR(CheckSizes("GeluBackwardCuda", n));
  if (n == 0) return Status::Ok();
  GeluBackwardKernel<T><<<Blocks(n, 256), 256, 0, stream>>>(dinp, accumulate, inp, dout, n);
  return Launched("GeluBackwardCuda");
}
template <typename T>
Status Relu2BackwardCuda(T* dinp, bool accumulate, const T* inp, const T* dout, int64_t n,
                         cudaStream_t stream) {
  ABLATE_RETURN_IF_ERROR(CheckSizes("Relu2BackwardCuda", n));
  if (n == 0) return Status::Ok();
  Relu2BackwardKernel<T><<<Blocks(n, 256), 256, 0, stream>>>(dinp, accumulate, inp, dout, n);
  return Launched("Relu2BackwardCuda");
}

Status ResidualForwardCuda(float* out, const float* inp1, const float* inp2, int64_t n,
                           cudaStream_t stream) {
  ABLATE_RETURN_IF_ERROR(CheckSizes("ResidualForwardCuda", n));
  if (n == 0) return Status::Ok();
  ResidualForwardKernel<<<Blocks(n, 256), 256, 0, stream>>>(out, inp1, inp2, n);
  return Launched("ResidualForwardCuda");
}
Status ResidualBackwardCuda(float* dinp1, float* dinp2, const float* dout, int64_t n,
                            cudaStream_t stream) {
  ABLATE_RETURN_IF_ERROR(CheckSizes("ResidualBackwardCuda", n));
  if (n == 0) return Status::Ok();
  ResidualBackwardKernel<<<Blocks(n, 256), 256, 0, stream>>>(dinp1, dinp2, dout, n);
  return Launched("ResidualBackwardCuda");
}

template <typename Tin, typename Tout>
Status CastCuda(Tout* out, const Tin* inp, int64_t n, cudaStream_t stream) {
  ABLATE_RETURN_IF_ERROR(CheckSizes("CastCuda", n));
  if (n == 0) return Status::Ok();
  CastKernel<Tin, Tout><<<Blocks(n, 256), 256, 0, stream>>>(out, inp, n);
  return Launched("CastCuda");
}

template <typename T>
Status SoftmaxCrossEntropyCuda(float* losses, T* dlogits, const T* logits, const int32_t* targets,
                               int64_t N, int V, float dloss, cudaStream_t stream) {
  ABLATE_RETURN_IF_ERROR(CheckSizes("SoftmaxCrossEntropyCuda", N, V));
  if (N > 0x7fffffff) return InvalidArgument("SoftmaxCrossEntropyCuda: too many rows");
  if (N == 0) return Status::Ok();
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

template <typename T>
Status HeadsMergeForwardCuda(T* out, const T* inp, int B, int Tn, int H, int D,
                             cudaStream_t stream) {
  ABLATE_RETURN_IF_ERROR(CheckSizes("HeadsMergeForwardCuda", int64_t(B) * Tn, int64_t(H) * D));
  const int64_t total = int64_t(B) * Tn * H * D;
  if (total == 0) return Status::Ok();
  HeadsMergeForwardKernel<T><<<Blocks(total, 256), 256, 0, stream>>>(out, inp, B, Tn, H, D);
  return Launched("HeadsMergeForwardCuda");
}

template <typename T>
Status HeadsMergeBackwardCuda(T* dinp, const T* dout, int B, int Tn, int H, int D,
                              cudaStream_t stream) {
  ABLATE_RETURN_IF_ERROR(CheckSizes("HeadsMergeBackwardCuda", int64_t(B) * Tn, int64_t(H) * D));
  const int64_t total = int64_t(B) * Tn * H * D;
  if (total == 0) return Status::Ok();
  HeadsMergeBackwardKernel<T><<<Blocks(total, 256), 256, 0, stream>>>(dinp, dout, B, Tn, H, D);
  return Launched("HeadsMergeBackwardCuda");
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
