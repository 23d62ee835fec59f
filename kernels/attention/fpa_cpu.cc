// FPA: exact softmax attention in T, forward and backward (kernels/ALGORITHMS.md §1.1), the reference of
// every other attention path.
//
// Untiled: per (b, h) the full N x N logits are formed with BLAS GEMMs (S = tau Q K^T, O = P V,
// dV = P^T dO, dP = dO V^T, dQ = tau dS K, dK = tau dS^T Q) and the row-wise softmax work runs
// between them, parallel over rows with OpenMP. Heads are processed in chunks so that the N x N
// buffers stay bounded. The GEMMs are issued one head at a time from a single thread: OpenBLAS
// threads each call internally, and calls made from inside an OpenMP region would serialize on its
// level-3 lock. OpenBLAS does not split the contracted dimension across threads, so results do not
// depend on the thread count.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "attention/attention_cpu.h"

namespace ablate::kernels {
namespace {

// Upper bound on the elements of one N x N scratch buffer (a chunk of heads); 32 MiB in float.
constexpr int64_t kChunkElems = int64_t(8) << 20;

// Row-major C = alpha * op(A) op(B) + beta * C.
void Gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
              k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void Gemm(bool ta, bool tb, int m, int n, int k, double alpha, const double* a, int lda,
          const double* b, int ldb, double beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
              k, alpha, a, lda, b, ldb, beta, c, ldc);
}

int HeadsPerChunk(const AttnShape& s) {
  const int64_t nn = int64_t(s.N) * s.N;
  const int64_t bh = int64_t(s.B) * s.H;
  return static_cast<int>(std::clamp<int64_t>(kChunkElems / nn, 1, bh));
}

template <typename T>
T Tau(const AttnShape& s) {
  return T(1) / std::sqrt(T(s.D));
}

// Backward core shared by FpaBackward and FpaIntermediates. p_all / ds_all: (B, H, N, N) outputs
// or null (then chunk scratch is used). dq/dk/dv: null to skip the gradient GEMMs.
template <typename T>
void FpaGrads(const AttnShape& s, const T* q, const T* k, const T* v, const T* o, const T* lse,
              const T* do_, T* dq, T* dk, T* dv, T* p_all, T* ds_all) {
  const int N = s.N, D = s.D, BH = s.B * s.H;
  const int64_t nn = int64_t(N) * N, nd = int64_t(N) * D;
  const T tau = Tau<T>(s);
  const int hc = (p_all && ds_all) ? BH : HeadsPerChunk(s);
  std::vector<T> p_scratch(p_all ? 0 : hc * nn), ds_scratch(ds_all ? 0 : hc * nn);

  for (int h0 = 0; h0 < BH; h0 += hc) {
    const int nh = std::min(hc, BH - h0);
    T* pbuf = p_all ? p_all + h0 * nn : p_scratch.data();
    T* dsbuf = ds_all ? ds_all + h0 * nn : ds_scratch.data();
    for (int h = 0; h < nh; ++h) {
      const int64_t off = (h0 + h) * nd;
      Gemm(false, true, N, N, D, tau, q + off, D, k + off, D, T(0), pbuf + h * nn, N);
      Gemm(false, true, N, N, D, T(1), do_ + off, D, v + off, D, T(0), dsbuf + h * nn, N);
    }
    // pbuf holds S and becomes P; dsbuf holds dP and becomes dS.
#pragma omp parallel for schedule(static)
    for (int64_t row = 0; row < int64_t(nh) * N; ++row) {
      const int64_t grow = h0 * int64_t(N) + row;  // row in (B*H*N)
      const int r = static_cast<int>(row % N);
      const T* dor = do_ + grow * D;
      const T* orow = o + grow * D;
      T di = 0;
      for (int d = 0; d < D; ++d) di += dor[d] * orow[d];
      T* pr = pbuf + row * N;
      T* dsr = dsbuf + row * N;
      const int nvalid = s.causal ? r + 1 : N;
      const T l = lse[grow];
      for (int c = 0; c < nvalid; ++c) {
        const T p = std::exp(pr[c] - l);
        pr[c] = p;
        dsr[c] = p * (dsr[c] - di);
      }
      std::fill(pr + nvalid, pr + N, T(0));
      std::fill(dsr + nvalid, dsr + N, T(0));
    }
    if (!dq) continue;
    for (int h = 0; h < nh; ++h) {
      const int64_t off = (h0 + h) * nd;
      Gemm(true, false, N, D, N, T(1), pbuf + h * nn, N, do_ + off, D, T(0), dv + off, D);
      Gemm(false, false, N, D, N, tau, dsbuf + h * nn, N, k + off, D, T(0), dq + off, D);
      Gemm(true, false, N, D, N, tau, dsbuf + h * nn, N, q + off, D, T(0), dk + off, D);
    }
  }
}

}  // namespace

template <typename T>
void FpaForward(const AttnShape& s, const T* q, const T* k, const T* v, T* o, T* lse) {
  const int N = s.N, D = s.D, BH = s.B * s.H;
  const int64_t nn = int64_t(N) * N, nd = int64_t(N) * D;
  const T tau = Tau<T>(s);
  const int hc = HeadsPerChunk(s);
  std::vector<T> sbuf(hc * nn);
  for (int h0 = 0; h0 < BH; h0 += hc) {
    const int nh = std::min(hc, BH - h0);
    for (int h = 0; h < nh; ++h) {
      const int64_t off = (h0 + h) * nd;
      Gemm(false, true, N, N, D, tau, q + off, D, k + off, D, T(0), sbuf.data() + h * nn, N);
    }
#pragma omp parallel for schedule(static)
    for (int64_t row = 0; row < int64_t(nh) * N; ++row) {
      const int r = static_cast<int>(row % N);
      const int nvalid = s.causal ? r + 1 : N;
      T* sr = sbuf.data() + row * N;
      T m = -std::numeric_limits<T>::infinity();
      for (int c = 0; c < nvalid; ++c) m = std::max(m, sr[c]);
      T l = 0;
      for (int c = 0; c < nvalid; ++c) {
        sr[c] = std::exp(sr[c] - m);
        l += sr[c];
      }
      const T inv = T(1) / l;
      for (int c = 0; c < nvalid; ++c) sr[c] *= inv;
      std::fill(sr + nvalid, sr + N, T(0));
      lse[h0 * int64_t(N) + row] = m + std::log(l);
    }
    for (int h = 0; h < nh; ++h) {
      const int64_t off = (h0 + h) * nd;
      Gemm(false, false, N, D, N, T(1), sbuf.data() + h * nn, N, v + off, D, T(0), o + off, D);
    }
  }
}

template <typename T>
void FpaBackward(const AttnShape& s, const T* q, const T* k, const T* v, const T* o, const T* lse,
                 const T* do_, T* dq, T* dk, T* dv) {
  FpaGrads(s, q, k, v, o, lse, do_, dq, dk, dv, static_cast<T*>(nullptr), static_cast<T*>(nullptr));
}

template <typename T>
void FpaIntermediates(const AttnShape& s, const T* q, const T* k, const T* v, const T* o,
                      const T* lse, const T* do_, std::vector<T>* p, std::vector<T>* ds) {
  const int64_t total = int64_t(s.B) * s.H * s.N * s.N;
  p->assign(total, T(0));
  ds->assign(total, T(0));
  FpaGrads(s, q, k, v, o, lse, do_, static_cast<T*>(nullptr), static_cast<T*>(nullptr),
           static_cast<T*>(nullptr), p->data(), ds->data());
}

#define ABLATE_INSTANTIATE_FPA(T)                                                                  \
  template void FpaForward<T>(const AttnShape&, const T*, const T*, const T*, T*, T*);             \
  template void FpaBackward<T>(const AttnShape&, const T*, const T*, const T*, const T*, const T*, \
                               const T*, T*, T*, T*);                                              \
  template void FpaIntermediates<T>(const AttnShape&, const T*, const T*, const T*, const T*,      \
                                    const T*, const T*, std::vector<T>*, std::vector<T>*);
ABLATE_INSTANTIATE_FPA(float)
ABLATE_INSTANTIATE_FPA(double)
#undef ABLATE_INSTANTIATE_FPA

}  // namespace ablate::kernels
