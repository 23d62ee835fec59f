// CPU layers: see layers_cpu.h for the contract of every function.
#include "layers/layers_cpu.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cassert>
#include <climits>
#include <cmath>
#include <cstring>
#include <vector>

namespace ablate::kernels {
namespace {

// Row-major GEMM C = alpha * op(A) op(B) + beta * C, dispatched on the scalar type.
void Gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k, float alpha,
          const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
          int64_t ldc) {
  assert(m <= INT_MAX && n <= INT_MAX && k <= INT_MAX);
  cblas_sgemm(CblasRowMajor, ta, tb, int(m), int(n), int(k), alpha, a, int(lda), b, int(ldb), beta,
              c, int(ldc));
}
void Gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k, double alpha,
          const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
          int64_t ldc) {
  assert(m <= INT_MAX && n <= INT_MAX && k <= INT_MAX);
  cblas_dgemm(CblasRowMajor, ta, tb, int(m), int(n), int(k), alpha, a, int(lda), b, int(ldb), beta,
              c, int(ldc));
}

// The channel slice [c0, c1) of C owned by the calling thread inside a parallel region. Reductions
// over rows run per channel slice so that every output element is summed in row order by exactly
// one thread: the result does not depend on the thread count.
inline void ThreadSlice(int C, int* c0, int* c1) {
  const int nt = omp_get_num_threads();
  const int t = omp_get_thread_num();
  *c0 = int(int64_t(C) * t / nt);
  *c1 = int(int64_t(C) * (t + 1) / nt);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
template <typename T>
void EncoderForward(T* out, const int32_t* inp, const T* wte, int64_t N, int C) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < N; ++r) {
    std::memcpy(out + r * C, wte + int64_t(inp[r]) * C, sizeof(T) * C);
  }
}

template <typename T>
void EncoderBackward(T* dwte, const T* dout, const int32_t* inp, int64_t N, int C) {
#pragma omp parallel
  {
    int c0, c1;
    ThreadSlice(C, &c0, &c1);
    for (int64_t r = 0; r < N; ++r) {
      T* dst = dwte + int64_t(inp[r]) * C;
      const T* src = dout + r * C;
      for (int c = c0; c < c1; ++c) dst[c] += src[c];
    }
  }
}

// ---------------------------------------------------------------------------------------------
template <typename T>
void RmsNormForward(T* out, T* rstd, const T* inp, const T* weight, int64_t N, int C) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < N; ++r) {
    const T* x = inp + r * C;
    T ss = 0;
    for (int c = 0; c < C; ++c) ss += x[c] * x[c];
    const T rs = T(1) / std::sqrt(ss / T(C) + T(kRmsNormEps));
    T* y = out + r * C;
    for (int c = 0; c < C; ++c) y[c] = x[c] * rs * weight[c];
    rstd[r] = rs;
  }
}

template <typename T>
void RmsNormBackward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight,
                     const T* rstd, int64_t N, int C) {
  // y_c = g_c x_c r with r = (mean(x^2) + eps)^(-1/2), dr/dx_j = -r^3 x_j / C, so
  // dx_j = r g_j dy_j - r^3 x_j / C * sum_c(g_c dy_c x_c).
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < N; ++r) {
    const T* dy = dout + r * C;
    const T* x = inp + r * C;
    T* dx = dinp + r * C;
    const T rs = rstd[r];
    T dot = 0;
    for (int c = 0; c < C; ++c) dot += weight[c] * dy[c] * x[c];
    const T k = rs * rs * rs * dot / T(C);
    for (int c = 0; c < C; ++c) dx[c] += rs * weight[c] * dy[c] - k * x[c];
  }
#pragma omp parallel
  {
    int c0, c1;
    ThreadSlice(C, &c0, &c1);
    std::vector<T> acc(std::max(c1 - c0, 0), T(0));
    for (int64_t r = 0; r < N; ++r) {
      const T* dy = dout + r * C;
      const T* x = inp + r * C;
      const T rs = rstd[r];
      for (int c = c0; c < c1; ++c) acc[c - c0] += dy[c] * x[c] * rs;
    }
    for (int c = c0; c < c1; ++c) dweight[c] += acc[c - c0];
  }
}

// ---------------------------------------------------------------------------------------------
template <typename T>
void MatmulForward(T* out, const T* inp, const T* weight, int64_t N, int IC, int OC) {
  Gemm(CblasNoTrans, CblasTrans, N, OC, IC, T(1), inp, IC, weight, IC, T(0), out, OC);
}

template <typename T>
void MatmulBackward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight, int64_t N,
                    int IC, int OC) {
  if (dinp != nullptr) {
    Gemm(CblasNoTrans, CblasNoTrans, N, IC, OC, T(1), dout, OC, weight, IC, T(1), dinp, IC);
  }
  Gemm(CblasTrans, CblasNoTrans, OC, IC, N, T(1), dout, OC, inp, IC, T(1), dweight, IC);
}

// ---------------------------------------------------------------------------------------------
template <typename T>
void RopeTables(T* cos, T* sin, int Tmax, int D, double base) {
  const int h = D / 2;
  for (int t = 0; t < Tmax; ++t) {
    for (int i = 0; i < h; ++i) {
      const double theta = double(t) * std::pow(base, -2.0 * i / D);
      cos[int64_t(t) * h + i] = T(std::cos(theta));
      sin[int64_t(t) * h + i] = T(std::sin(theta));
    }
  }
}

template <typename T>
void RopeForward(T* out, const T* inp, const T* cos, const T* sin, int64_t BH, int Tn, int D) {
  const int h = D / 2;
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < BH * Tn; ++row) {
    const int t = int(row % Tn);
    const T* x = inp + row * D;
    T* y = out + row * D;
    const T* cs = cos + int64_t(t) * h;
    const T* sn = sin + int64_t(t) * h;
    for (int i = 0; i < h; ++i) {
      const T a = x[i], b = x[i + h];
      y[i] = a * cs[i] - b * sn[i];
      y[i + h] = a * sn[i] + b * cs[i];
    }
  }
}

template <typename T>
void RopeBackward(T* dinp, const T* dout, const T* cos, const T* sin, int64_t BH, int Tn, int D) {
  const int h = D / 2;
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < BH * Tn; ++row) {
    const int t = int(row % Tn);
    const T* dy = dout + row * D;
    T* dx = dinp + row * D;
    const T* cs = cos + int64_t(t) * h;
    const T* sn = sin + int64_t(t) * h;
    for (int i = 0; i < h; ++i) {
      const T a = dy[i], b = dy[i + h];
      dx[i] += a * cs[i] + b * sn[i];
      dx[i + h] += b * cs[i] - a * sn[i];
    }
  }
}

// ---------------------------------------------------------------------------------------------
namespace {
constexpr double kGeluScale = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kGeluCube = 0.044715;

// 0.5 (1 + tanh(u)) = sigmoid(2u) with u = sqrt(2/pi) (x + 0.044715 x^3), so GELU(x) = x * this.
// Written with exp instead of tanh: glibc's tanhf is about 7x slower than its expf, and the
// sigmoid form keeps full relative precision for very negative x, where 1 + tanh(u) would cancel.
// exp overflow gives the right limits (0 for x -> -inf, 1 for x -> +inf).
template <typename T>
inline T GeluSigmoid(T x) {
  const T u = T(kGeluScale) * (x + T(kGeluCube) * x * x * x);
  return T(1) / (T(1) + std::exp(T(-2) * u));
}
}  // namespace

template <typename T>
void GeluForward(T* out, const T* inp, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = inp[i] * GeluSigmoid(inp[i]);
}

template <typename T>
void GeluBackward(T* dinp, const T* inp, const T* dout, int64_t n) {
  const T s = T(kGeluScale), a = T(kGeluCube);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const T x = inp[i];
    const T sg = GeluSigmoid(x);
    // d/dx [x sigmoid(2u)] = sigmoid(2u) + 2 x sigmoid(2u) (1 - sigmoid(2u)) du/dx, which is the
    // usual 0.5 (1 + tanh) + 0.5 x sech^2(u) du/dx.
    const T grad = sg + T(2) * x * sg * (T(1) - sg) * s * (T(1) + T(3) * a * x * x);
    dinp[i] += grad * dout[i];
  }
}

template <typename T>
void Relu2Forward(T* out, const T* inp, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const T r = inp[i] > T(0) ? inp[i] : T(0);
    out[i] = r * r;
  }
}

template <typename T>
void Relu2Backward(T* dinp, const T* inp, const T* dout, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const T r = inp[i] > T(0) ? inp[i] : T(0);
    dinp[i] += T(2) * r * dout[i];
  }
}

// ---------------------------------------------------------------------------------------------
template <typename T>
void ResidualForward(T* out, const T* inp1, const T* inp2, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = inp1[i] + inp2[i];
}

template <typename T>
void ResidualBackward(T* dinp1, T* dinp2, const T* dout, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    dinp1[i] += dout[i];
    dinp2[i] += dout[i];
  }
}

// ---------------------------------------------------------------------------------------------
template <typename T>
void SoftmaxCrossEntropy(T* losses, T* dlogits, const T* logits, const int32_t* targets, int64_t N,
                         int V, T dloss) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < N; ++r) {
    const T* z = logits + r * V;
    T mx = z[0];
    for (int j = 1; j < V; ++j) mx = std::max(mx, z[j]);
    T sum = 0;
    for (int j = 0; j < V; ++j) sum += std::exp(z[j] - mx);
    const int tgt = targets[r];
    if (losses != nullptr) losses[r] = std::log(sum) + mx - z[tgt];
    if (dlogits != nullptr) {
      // Written element by element after its read, so dlogits may alias logits.
      T* dz = dlogits + r * V;
      const T inv = T(1) / sum;
      for (int j = 0; j < V; ++j) {
        const T p = std::exp(z[j] - mx) * inv;
        dz[j] = dloss * (p - (j == tgt ? T(1) : T(0)));
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
template <typename T>
void QkvSplitForward(T* q, T* k, T* v, const T* qkv, int B, int Tn, int H, int D) {
  const int64_t C = int64_t(H) * D;
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < Tn; ++t) {
      const T* src = qkv + (int64_t(b) * Tn + t) * 3 * C;
      for (int h = 0; h < H; ++h) {
        const int64_t dst = ((int64_t(b) * H + h) * Tn + t) * D;
        std::memcpy(q + dst, src + h * D, sizeof(T) * D);
        std::memcpy(k + dst, src + C + h * D, sizeof(T) * D);
        std::memcpy(v + dst, src + 2 * C + h * D, sizeof(T) * D);
      }
    }
  }
}

template <typename T>
void QkvSplitBackward(T* dqkv, const T* dq, const T* dk, const T* dv, int B, int Tn, int H, int D) {
  const int64_t C = int64_t(H) * D;
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < Tn; ++t) {
      T* dst = dqkv + (int64_t(b) * Tn + t) * 3 * C;
      for (int h = 0; h < H; ++h) {
        const int64_t src = ((int64_t(b) * H + h) * Tn + t) * D;
        for (int d = 0; d < D; ++d) {
          dst[h * D + d] += dq[src + d];
          dst[C + h * D + d] += dk[src + d];
          dst[2 * C + h * D + d] += dv[src + d];
        }
      }
    }
  }
}

template <typename T>
void HeadsMergeForward(T* out, const T* inp, int B, int Tn, int H, int D) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < Tn; ++t) {
      T* dst = out + (int64_t(b) * Tn + t) * H * D;
      for (int h = 0; h < H; ++h) {
        std::memcpy(dst + h * D, inp + ((int64_t(b) * H + h) * Tn + t) * D, sizeof(T) * D);
      }
    }
  }
}

template <typename T>
void HeadsMergeBackward(T* dinp, const T* dout, int B, int Tn, int H, int D) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < Tn; ++t) {
      const T* src = dout + (int64_t(b) * Tn + t) * H * D;
      for (int h = 0; h < H; ++h) {
        T* dst = dinp + ((int64_t(b) * H + h) * Tn + t) * D;
        for (int d = 0; d < D; ++d) dst[d] += src[h * D + d];
      }
    }
  }
}

template <typename T>
void AddHeadOffset(T* x, const T* offset, int64_t BH, int H, int Tn, int D) {
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < BH * Tn; ++row) {
    const T* b = offset + (row / Tn % H) * D;
    T* y = x + row * D;
    for (int d = 0; d < D; ++d) y[d] += b[d];
  }
}

// ---------------------------------------------------------------------------------------------
#define ABLATE_INSTANTIATE_LAYERS(T)                                                              \
  template void EncoderForward<T>(T*, const int32_t*, const T*, int64_t, int);                    \
  template void EncoderBackward<T>(T*, const T*, const int32_t*, int64_t, int);                   \
  template void RmsNormForward<T>(T*, T*, const T*, const T*, int64_t, int);                      \
  template void RmsNormBackward<T>(T*, T*, const T*, const T*, const T*, const T*, int64_t, int); \
  template void MatmulForward<T>(T*, const T*, const T*, int64_t, int, int);                      \
  template void MatmulBackward<T>(T*, T*, const T*, const T*, const T*, int64_t, int, int);       \
  template void RopeTables<T>(T*, T*, int, int, double);                                          \
  template void RopeForward<T>(T*, const T*, const T*, const T*, int64_t, int, int);              \
  template void RopeBackward<T>(T*, const T*, const T*, const T*, int64_t, int, int);             \
  template void AddHeadOffset<T>(T*, const T*, int64_t, int, int, int);                           \
  template void GeluForward<T>(T*, const T*, int64_t);                                            \
  template void GeluBackward<T>(T*, const T*, const T*, int64_t);                                 \
  template void Relu2Forward<T>(T*, const T*, int64_t);                                           \
  template void Relu2Backward<T>(T*, const T*, const T*, int64_t);                                \
  template void ResidualForward<T>(T*, const T*, const T*, int64_t);                              \
  template void ResidualBackward<T>(T*, T*, const T*, int64_t);                                   \
  template void SoftmaxCrossEntropy<T>(T*, T*, const T*, const int32_t*, int64_t, int, T);        \
  template void QkvSplitForward<T>(T*, T*, T*, const T*, int, int, int, int);                     \
  template void QkvSplitBackward<T>(T*, const T*, const T*, const T*, int, int, int, int);        \
  template void HeadsMergeForward<T>(T*, const T*, int, int, int, int);                           \
  template void HeadsMergeBackward<T>(T*, const T*, int, int, int, int);

ABLATE_INSTANTIATE_LAYERS(float)
ABLATE_INSTANTIATE_LAYERS(double)
#undef ABLATE_INSTANTIATE_LAYERS

}  // namespace ablate::kernels
