// Device attention diagnostics: see diag_cuda.h.
#include <algorithm>
#include "trainer/cuda/diag_cuda.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "ablate/cuda_status.h"
#include "attention/cuda/attention_cuda.h"
#include "layers/cuda/layers_cuda.h"

namespace ablate::trainer::cuda {
namespace {

namespace kc = ::ablate::kernels::cuda;
namespace kk = ::ablate::kernels;
using bf16 = __nv_bfloat16;

constexpr int kTile = 64;  // kSageBq == kSageBkv

__device__ __forceinline__ float Scale127(float max_abs) {
  const float s = max_abs / 127.0f;
  return s == 0.0f ? 1.0f : s;
}
__device__ __forceinline__ int Quant(float x, float s) {
  return int(fminf(fmaxf(rintf(x / s), -127.0f), 127.0f));
}

// kbar[bh][d] = mean over the N rows of K (zeros without smooth_k).
__global__ void KMeanKernel(float* kbar, const bf16* k, int N, int D, bool smooth_k) {
  const int64_t bh = blockIdx.x;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float s = 0.f;
    if (smooth_k) {
      for (int n = 0; n < N; ++n) s += __bfloat162float(k[(bh * N + n) * D + d]);
      s /= float(N);
    }
    kbar[bh * D + d] = s;
  }
}

__device__ float BlockMax(float v, float* sh) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (threadIdx.x % 32 == 0) sh[threadIdx.x / 32] = v;
  __syncthreads();
  float m = 0.f;
  for (int w = 0; w < int(blockDim.x / 32); ++w) m = fmaxf(m, sh[w]);
  __syncthreads();
  return m;
}

// Per Q tile (bh, t): mu (smooth_q), sq = scale of Q - mu, sdo = scale of dO.
__global__ void QTileKernel(float* mu, float* sq, float* sdo, const bf16* q, const bf16* dO, int N,
                            int D, int ntq, bool smooth_q) {
  __shared__ float sh[32];
  const int64_t bh = blockIdx.y;
  const int t = blockIdx.x;
  const int r0 = t * kTile, nr = min(kTile, N - r0);
  float* m = mu + (bh * ntq + t) * D;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float s = 0.f;
    if (smooth_q) {
      for (int r = 0; r < nr; ++r) s += __bfloat162float(q[(bh * N + r0 + r) * D + d]);
      s /= float(nr);
    }
    m[d] = s;
  }
  __syncthreads();
  float mq = 0.f, md = 0.f;
  for (int e = threadIdx.x; e < nr * D; e += blockDim.x) {
    const int r = e / D, d = e % D;
    const int64_t idx = (bh * N + r0 + r) * D + d;
    mq = fmaxf(mq, fabsf(__bfloat162float(q[idx]) - m[d]));
    md = fmaxf(md, fabsf(__bfloat162float(dO[idx])));
  }
  mq = BlockMax(mq, sh);
  md = BlockMax(md, sh);
  if (threadIdx.x == 0) {
    sq[bh * ntq + t] = Scale127(mq);
    sdo[bh * ntq + t] = Scale127(md);
  }
}

// Per K tile: sk = scale of K - kbar, sv = scale of V; then the int8 K^, V^ of the tile.
__global__ void KTileKernel(float* sk, float* sv, signed char* kh, signed char* vh, const bf16* k,
                            const bf16* v, const float* kbar, int N, int D, int ntk) {
  __shared__ float sh[32];
  const int64_t bh = blockIdx.y;
  const int t = blockIdx.x;
  const int r0 = t * kTile, nr = min(kTile, N - r0);
  const float* kb = kbar + bh * D;
  float mk = 0.f, mv = 0.f;
  for (int e = threadIdx.x; e < nr * D; e += blockDim.x) {
    const int r = e / D, d = e % D;
    const int64_t idx = (bh * N + r0 + r) * D + d;
    mk = fmaxf(mk, fabsf(__bfloat162float(k[idx]) - kb[d]));
    mv = fmaxf(mv, fabsf(__bfloat162float(v[idx])));
  }
  const float s_k = Scale127(BlockMax(mk, sh));
  const float s_v = Scale127(BlockMax(mv, sh));
  if (threadIdx.x == 0) {
    sk[bh * ntk + t] = s_k;
    sv[bh * ntk + t] = s_v;
  }
  for (int e = threadIdx.x; e < nr * D; e += blockDim.x) {
    const int r = e / D, d = e % D;
    const int64_t idx = (bh * N + r0 + r) * D + d;
    kh[idx] = (signed char)Quant(__bfloat162float(k[idx]) - kb[d], s_k);
    vh[idx] = (signed char)Quant(__bfloat162float(v[idx]), s_v);
  }
}

// drow[bh*N + i] = sum_d dO * O.
__global__ void RowDotKernel(float* drow, const bf16* dO, const bf16* o, int64_t rows, int D) {
  const int64_t r = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  float s = 0.f;
  for (int d = lane; d < D; d += 32) s += __bfloat162float(dO[r * D + d]) * __bfloat162float(o[r * D + d]);
  for (int o2 = 16; o2 > 0; o2 >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o2);
  if (lane == 0) drow[r] = s;
}

struct PdsParams {
  const bf16 *q, *k, *v, *dO;
  const signed char *kh, *vh;
  const float *kbar, *mu, *sq, *sdo, *sk, *sv;
  const float *lse_s, *lse_f, *drow_s, *drow_f;
  int N, D, ntq, ntk;
  float tau;
  bool smooth_q, int8_dp;
  double* acc;  // [0..5] P, [6..11] dS
};

// Block per (query i, bh); threads over keys j <= i.
__global__ void PdsKernel(PdsParams p) {
  extern __shared__ float smem[];
  const int D = p.D, N = p.N;
  float* qf = smem;          // q_i
  float* dof = qf + D;       // dO_i
  float* muq = dof + D;      // mu of i's tile
  int* qh = reinterpret_cast<int*>(muq + D);
  int* doh = qh + D;
  const int64_t bh = blockIdx.y;
  const int i = blockIdx.x;
  const int ti = i / kTile;
  const float sqi = p.sq[bh * p.ntq + ti], sdoi = p.sdo[bh * p.ntq + ti];
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    const int64_t idx = (bh * N + i) * D + d;
    qf[d] = __bfloat162float(p.q[idx]);
    dof[d] = __bfloat162float(p.dO[idx]);
    muq[d] = p.mu[(bh * p.ntq + ti) * D + d];
    qh[d] = Quant(qf[d] - muq[d], sqi);
    doh[d] = Quant(dof[d], sdoi);
  }
  __syncthreads();
  const float lse_s = p.lse_s[bh * N + i], lse_f = p.lse_f[bh * N + i];
  const float dr_s = p.drow_s[bh * N + i], dr_f = p.drow_f[bh * N + i];
  const float* kb = p.kbar + bh * D;
  double a[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  for (int j = threadIdx.x; j <= i; j += blockDim.x) {
    const int64_t kj = (bh * N + j) * D;
    const int tj = j / kTile;
    float qk = 0.f, dp = 0.f, bias = 0.f;
    int iqk = 0, idp = 0;
    for (int d = 0; d < D; ++d) {
      const float kv = __bfloat162float(p.k[kj + d]);
      const float vv = __bfloat162float(p.v[kj + d]);
      qk += qf[d] * kv;
      dp += dof[d] * vv;
      iqk += qh[d] * int(p.kh[kj + d]);
      idp += doh[d] * int(p.vh[kj + d]);
      bias += muq[d] * (kv - kb[d]);
    }
    const float pf = expf(p.tau * qk - lse_f);
    const float dsf = pf * (dp - dr_f);
    float s_s = p.tau * sqi * p.sk[bh * p.ntk + tj] * float(iqk);
    if (p.smooth_q) s_s += p.tau * bias;
    const float ps = expf(s_s - lse_s);
    const float dps = p.int8_dp ? sdoi * p.sv[bh * p.ntk + tj] * float(idp) : dp;
    const float dss = ps * (dps - dr_s);
    const double x[2] = {ps, dss}, y[2] = {pf, dsf};
    for (int t = 0; t < 2; ++t) {
      const double df = x[t] - y[t];
      a[6 * t + 0] += x[t] * y[t];
      a[6 * t + 1] += x[t] * x[t];
      a[6 * t + 2] += y[t] * y[t];
      a[6 * t + 3] += df * df;
      a[6 * t + 4] += fabs(df);
      a[6 * t + 5] += fabs(y[t]);
    }
  }
  for (int t = 0; t < 12; ++t) {
    double v = a[t];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (threadIdx.x % 32 == 0 && v != 0.0) atomicAdd(p.acc + t, v);
  }
}

kk::ErrorStats Stats(const double* a) {
  const double xy = a[0], xx = a[1], yy = a[2], dd = a[3], abs_d = a[4], abs_y = a[5];
  const double inf = std::numeric_limits<double>::infinity();
  kk::ErrorStats st;
  if (xx == 0 || yy == 0) {
    st.cosine = (xx == 0 && yy == 0) ? 1.0 : 0.0;
  } else {
    st.cosine = xy / (std::sqrt(xx) * std::sqrt(yy));
  }
  st.rel_l2 = yy > 0 ? std::sqrt(dd) / std::sqrt(yy) : (dd == 0 ? 0.0 : inf);
  st.rel_l1 = abs_y > 0 ? abs_d / abs_y : (abs_d == 0 ? 0.0 : inf);
  return st;
}

}  // namespace

struct DiagScratch::Impl {
  std::vector<void*> ptrs;
  int64_t n = 0, rows = 0;  // capacity: elements of one (nb, H, N, D) tensor, rows (nb, H, N)
  int64_t ntq_total = 0, kbar_n = 0;
  size_t sage_ws_bytes = 0, fpa_ws_bytes = 0, det_ws_bytes = 0;
  bf16 *o_s, *dq_s, *dk_s, *dv_s, *o_f, *dq_f, *dk_f, *dv_f;
  float *lse_s, *lse_f, *drow_s, *drow_f, *kbar, *mu, *sq, *sdo, *sk, *sv, *mx;
  signed char *kh, *vh;
  void *sage_ws, *fpa_ws;
  void* det_ws = nullptr;  // opt.deterministic: both backward calls' dQ slices
  double* acc;  // 6 tensors x 6 sums
  ~Impl() {
    for (void* p : ptrs) cudaFree(p);
  }
  template <typename T>
  Status Alloc(T** out, size_t count) {
    void* p = nullptr;
    ABLATE_RETURN_IF_ERROR(DeviceAlloc(&p, std::max<size_t>(count * sizeof(T), 256), "diagnostics"));
    ptrs.push_back(p);
    *out = static_cast<T*>(p);
    return Status::Ok();
  }
};

DiagScratch::DiagScratch() = default;
DiagScratch::~DiagScratch() = default;
DiagScratch::DiagScratch(DiagScratch&&) noexcept = default;
DiagScratch& DiagScratch::operator=(DiagScratch&&) noexcept = default;

Status ShadowAttentionErrors(const LayerShadowInput& in, const kk::AttnOptions& opt,
                             DiagScratch* scratch, LayerShadowErrors* out, cudaStream_t s) {
  const kk::AttnShape sub{in.nb, in.H, in.N, in.D, /*causal=*/true};
  const int64_t n = sub.numel(), rows = sub.rows(), BH = int64_t(in.nb) * in.H;
  const int ntq = (in.N + kTile - 1) / kTile;
  const size_t sage_bytes = kk::SageWorkspaceBytes(sub);
  const size_t fpa_bytes = kk::FpaWorkspaceBytes(sub);
  // The shadow pair runs deterministic like the model (diagnostics repeat to the bit too).
  const size_t det_bytes =
      opt.deterministic ? std::max(kk::SageDetScratchBytes(sub, opt), kk::FpaDetScratchBytes(sub))
                        : 0;
  if (!scratch->impl || scratch->impl->n < n || scratch->impl->sage_ws_bytes < sage_bytes ||
      scratch->impl->det_ws_bytes < det_bytes) {
    ABLATE_RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(s), "sync"));
    auto im = std::make_unique<DiagScratch::Impl>();
    im->n = n;
    im->rows = rows;
    im->sage_ws_bytes = sage_bytes;
    im->fpa_ws_bytes = fpa_bytes;
    im->det_ws_bytes = det_bytes;
    for (bf16** b : {&im->o_s, &im->dq_s, &im->dk_s, &im->dv_s, &im->o_f, &im->dq_f, &im->dk_f,
                     &im->dv_f}) {
      ABLATE_RETURN_IF_ERROR(im->Alloc(b, n));
    }
    for (float** f : {&im->lse_s, &im->lse_f, &im->drow_s, &im->drow_f}) {
      ABLATE_RETURN_IF_ERROR(im->Alloc(f, rows));
    }
    ABLATE_RETURN_IF_ERROR(im->Alloc(&im->kbar, BH * in.D));
    ABLATE_RETURN_IF_ERROR(im->Alloc(&im->mu, BH * ntq * in.D));
    for (float** f : {&im->sq, &im->sdo, &im->sk, &im->sv}) {
      ABLATE_RETURN_IF_ERROR(im->Alloc(f, BH * ntq));
    }
    ABLATE_RETURN_IF_ERROR(im->Alloc(&im->mx, 1));
    ABLATE_RETURN_IF_ERROR(im->Alloc(&im->kh, n));
    ABLATE_RETURN_IF_ERROR(im->Alloc(&im->vh, n));
    char *ws1 = nullptr, *ws2 = nullptr;
    ABLATE_RETURN_IF_ERROR(im->Alloc(&ws1, sage_bytes));
    ABLATE_RETURN_IF_ERROR(im->Alloc(&ws2, fpa_bytes));
    im->sage_ws = ws1;
    im->fpa_ws = ws2;
    if (det_bytes > 0) {
      char* ws3 = nullptr;
      ABLATE_RETURN_IF_ERROR(im->Alloc(&ws3, det_bytes));
      im->det_ws = ws3;
    }
    ABLATE_RETURN_IF_ERROR(im->Alloc(&im->acc, 36));
    scratch->impl = std::move(im);
  }
  DiagScratch::Impl& d = *scratch->impl;
  ABLATE_RETURN_IF_ERROR(CudaStatus(cudaMemsetAsync(d.acc, 0, 36 * sizeof(double), s), "memset"));
  // The shadow pair: SageBwd (the model's options) and FPA on the same inputs.
  ABLATE_RETURN_IF_ERROR(kk::SageForwardCuda(sub, opt, in.q, in.k, in.v, d.o_s, d.lse_s, d.sage_ws,
                                             d.sage_ws_bytes, s));
  ABLATE_RETURN_IF_ERROR(kk::SageBackwardCuda(sub, opt, in.q, in.k, in.v, d.o_s, d.lse_s, in.dout,
                                              d.dq_s, d.dk_s, d.dv_s, d.sage_ws, d.sage_ws_bytes, s,
                                              d.det_ws, d.det_ws_bytes));
  ABLATE_RETURN_IF_ERROR(kk::FpaForwardCuda(sub, in.q, in.k, in.v, d.o_f, d.lse_f, s));
  ABLATE_RETURN_IF_ERROR(kk::FpaBackwardCuda(sub, in.q, in.k, in.v, d.o_f, d.lse_f, in.dout, d.dq_f,
                                             d.dk_f, d.dv_f, d.fpa_ws, d.fpa_ws_bytes, s,
                                             opt.deterministic ? d.det_ws : nullptr,
                                             d.det_ws_bytes));
  ABLATE_RETURN_IF_ERROR((kc::CompareAccumulateCuda<bf16, bf16>(d.acc + 0, d.o_s, d.o_f, n, s)));
  ABLATE_RETURN_IF_ERROR((kc::CompareAccumulateCuda<bf16, bf16>(d.acc + 6, d.dq_s, d.dq_f, n, s)));
  ABLATE_RETURN_IF_ERROR((kc::CompareAccumulateCuda<bf16, bf16>(d.acc + 12, d.dk_s, d.dk_f, n, s)));
  ABLATE_RETURN_IF_ERROR((kc::CompareAccumulateCuda<bf16, bf16>(d.acc + 18, d.dv_s, d.dv_f, n, s)));

  // P and dS.
  KMeanKernel<<<unsigned(BH), 64, 0, s>>>(d.kbar, in.k, in.N, in.D, opt.smooth_k);
  dim3 tiles(ntq, unsigned(BH));
  QTileKernel<<<tiles, 256, 0, s>>>(d.mu, d.sq, d.sdo, in.q, in.dout, in.N, in.D, ntq, opt.smooth_q);
  KTileKernel<<<tiles, 256, 0, s>>>(d.sk, d.sv, d.kh, d.vh, in.k, in.v, d.kbar, in.N, in.D, ntq);
  RowDotKernel<<<unsigned((rows + 7) / 8), 256, 0, s>>>(d.drow_s, in.dout, d.o_s, rows, in.D);
  RowDotKernel<<<unsigned((rows + 7) / 8), 256, 0, s>>>(d.drow_f, in.dout, d.o_f, rows, in.D);
  PdsParams pp{in.q,   in.k,   in.v,      in.dout,  d.kh,     d.vh,     d.kbar, d.mu,
               d.sq,   d.sdo,  d.sk,      d.sv,     d.lse_s,  d.lse_f,  d.drow_s, d.drow_f,
               in.N,   in.D,   ntq,       ntq,      float(1.0 / std::sqrt(double(in.D))),
               opt.smooth_q,   opt.int8_dp,         d.acc + 24};
  dim3 grid(in.N, unsigned(BH));
  const size_t smem = size_t(in.D) * (3 * sizeof(float) + 2 * sizeof(int));
  PdsKernel<<<grid, 128, smem, s>>>(pp);
  ABLATE_RETURN_IF_ERROR(CudaStatus(cudaGetLastError(), "diagnostics kernels"));

  // Max logit over the whole batch.
  ABLATE_RETURN_IF_ERROR(kc::InitMaxCuda(d.mx, s));
  ABLATE_RETURN_IF_ERROR(kc::MaxCausalLogitCuda(d.mx, in.q, in.k, int64_t(in.B) * in.H, in.N, in.D,
                                                float(1.0 / std::sqrt(double(in.D))), s));
  double acc[36];
  float mx = 0;
  ABLATE_RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(acc, d.acc, sizeof acc, cudaMemcpyDeviceToHost, s), "read diagnostics"));
  ABLATE_RETURN_IF_ERROR(
      CudaStatus(cudaMemcpyAsync(&mx, d.mx, sizeof mx, cudaMemcpyDeviceToHost, s), "read max"));
  ABLATE_RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(s), "diagnostics"));
  out->o = Stats(acc + 0);
  out->dq = Stats(acc + 6);
  out->dk = Stats(acc + 12);
  out->dv = Stats(acc + 18);
  out->p = Stats(acc + 24);
  out->ds = Stats(acc + 30);
  out->max_logit = mx;
  return Status::Ok();
}

}  // namespace ablate::trainer::cuda
