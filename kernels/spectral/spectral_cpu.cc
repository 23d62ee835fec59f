// Psi_p on the CPU: Newton-Schulz, the coupled Newton chain and the eigh route (spectral_cpu.h).
#include "spectral/spectral_cpu.h"

#include <cblas.h>
#include <lapacke.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace ablate::kernels {
namespace {

// ---- cblas / LAPACKE dispatch on T ---------------------------------------------------------

// C = alpha op(A) op(B) + beta C, row-major, op(A): (M, K), op(B): (K, N), C: (M, N).
inline void Gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                 const float* B, int ldb, float beta, float* C, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
              K, alpha, A, lda, B, ldb, beta, C, ldc);
}
inline void Gemm(bool ta, bool tb, int M, int N, int K, double alpha, const double* A, int lda,
                 const double* B, int ldb, double beta, double* C, int ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
              K, alpha, A, lda, B, ldb, beta, C, ldc);
}
// Upper triangle of C = op(A) op(A)^T, op(A): (N, K); trans means op(A) = A^T with A: (K, N).
inline void Syrk(bool trans, int N, int K, const float* A, int lda, float* C) {
  cblas_ssyrk(CblasRowMajor, CblasUpper, trans ? CblasTrans : CblasNoTrans, N, K, 1.0f, A, lda,
              0.0f, C, N);
}
inline void Syrk(bool trans, int N, int K, const double* A, int lda, double* C) {
  cblas_dsyrk(CblasRowMajor, CblasUpper, trans ? CblasTrans : CblasNoTrans, N, K, 1.0, A, lda, 0.0,
              C, N);
}
inline lapack_int Syevd(int n, float* a, float* w) {
  return LAPACKE_ssyevd(LAPACK_ROW_MAJOR, 'V', 'U', n, a, n, w);
}
inline lapack_int Syevd(int n, double* a, double* w) {
  return LAPACKE_dsyevd(LAPACK_ROW_MAJOR, 'V', 'U', n, a, n, w);
}

// ---- small helpers -------------------------------------------------------------------------

// syrk fills the upper triangle only; copy it down so later GEMMs see the full matrix.
template <typename T>
void MirrorUpper(T* c, int n) {
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < i; ++j) c[size_t(i) * n + j] = c[size_t(j) * n + i];
}

template <typename T>
void Symmetrize(T* c, int n) {
  for (int i = 0; i < n; ++i)
    for (int j = i + 1; j < n; ++j) {
      T v = T(0.5) * (c[size_t(i) * n + j] + c[size_t(j) * n + i]);
      c[size_t(i) * n + j] = v;
      c[size_t(j) * n + i] = v;
    }
}

template <typename T>
double FrobeniusNorm(const T* x, size_t count) {
  double s = 0;
  for (size_t i = 0; i < count; ++i) s += double(x[i]) * double(x[i]);
  return std::sqrt(s);
}

// Gram matrix of the short side: g = O^T O (n <= m, size n) or O O^T (n > m, size m).
template <typename T>
void ShortGram(const T* o, int m, int n, T* g) {
  if (n <= m) {
    Syrk(/*trans=*/true, n, m, o, n, g);
    MirrorUpper(g, n);
  } else {
    Syrk(/*trans=*/false, m, n, o, n, g);
    MirrorUpper(g, m);
  }
}

// out = O F (n <= m, F: n x n) or F O (n > m, F: m x m).
template <typename T>
void ApplyGramFactor(const T* o, int m, int n, const T* f, T* out) {
  if (n <= m)
    Gemm(false, false, m, n, n, T(1), o, n, f, n, T(0), out, n);
  else
    Gemm(false, false, m, n, m, T(1), f, m, o, n, T(0), out, n);
}

// Coupled Newton route: F = G^{-e} as a product of chained roots.
template <typename T>
Status CoupledNewtonGramPower(const T* g, int r, double e, int iters, T* f, PsiStats* stats) {
  const size_t rr = size_t(r) * r;
  std::vector<T> root(rr), next(rr), acc(rr), tmp(rr);
  double residual = 0;
  auto record = [&](double res) {
    ++stats->newton_calls;
    stats->newton_residual = std::max(stats->newton_residual, res);
  };
  // G^{-1/2}: the first link of the chain.
  CoupledNewtonSqrt(g, r, iters, static_cast<T*>(nullptr), root.data(), &residual);
  record(residual);
  if (e == 1.0) {
    Gemm(false, false, r, r, r, T(1), root.data(), r, root.data(), r, T(0), f, r);
    Symmetrize(f, r);
    return Status::Ok();
  }
  std::vector<int> digits;
  if (!DyadicDigits(e, 62, &digits)) return InvalidArgument("coupled Newton: exponent not dyadic");
  bool have_acc = false;
  for (size_t k = 0; k < digits.size(); ++k) {
    if (k > 0) {
      // G^{-1/2^{k+1}} = (G^{-1/2^k})^{1/2}.
      CoupledNewtonSqrt(root.data(), r, iters, next.data(), static_cast<T*>(nullptr), &residual);
      record(residual);
      std::swap(root, next);
    }
    if (!digits[k]) continue;
    if (!have_acc) {
      acc = root;
      have_acc = true;
    } else {
      Gemm(false, false, r, r, r, T(1), acc.data(), r, root.data(), r, T(0), tmp.data(), r);
      std::swap(acc, tmp);
    }
  }
  // The factors commute exactly but not in rounding; F is symmetric by definition, so make it so
  // (keeps Psi_p(O^T) = Psi_p(O)^T to rounding).
  Symmetrize(acc.data(), r);
  std::copy(acc.begin(), acc.end(), f);
  return Status::Ok();
}

}  // namespace

// Binary digits of e in [0, 1): digits[k - 1] is the coefficient of 2^{-k}. False when e needs
// more than max_bits digits (not dyadic at that level).
bool DyadicDigits(double e, int max_bits, std::vector<int>* digits) {
  digits->clear();
  double t = e;
  for (int k = 0; k < max_bits && t != 0.0; ++k) {
    t *= 2;  // exact: scaling by 2 never rounds
    int d = t >= 1.0 ? 1 : 0;
    t -= d;
    digits->push_back(d);
  }
  return t == 0.0;
}

StatusOr<PsiMethod> ResolvePsiMethod(double p, const PsiOptions& opt) {
  if (!(p >= -1.0 && p <= 1.0))
    return InvalidArgument("Psi: p must be in [-1, 1], got " + std::to_string(p));
  if (opt.ns_steps < 0 || opt.newton_iters < 1 || opt.max_dyadic_level < 0 ||
      opt.max_dyadic_level > 30)
    return InvalidArgument(
        "Psi: bad options (ns_steps >= 0, newton_iters >= 1, "
        "max_dyadic_level in [0, 30])");
  auto is_dyadic = [](double x, int level) {
    return std::ldexp(x, level) == std::nearbyint(std::ldexp(x, level));
  };
  PsiMethod method = opt.method;
  if (method == PsiMethod::kAuto) {
    if (p == 1.0)
      method = PsiMethod::kIdentity;
    else if (p == 0.0)
      method = PsiMethod::kNewtonSchulz;
    else if (is_dyadic(p, opt.max_dyadic_level))
      method = PsiMethod::kCoupledNewton;
    else
      method = PsiMethod::kEigh;
  }
  const std::string pstr = std::to_string(p);
  switch (method) {
    case PsiMethod::kIdentity:
      if (p != 1.0) return InvalidArgument("Psi: identity route needs p = 1, got " + pstr);
      break;
    case PsiMethod::kNewtonSchulz:
      if (p != 0.0) return InvalidArgument("Psi: Newton-Schulz route needs p = 0, got " + pstr);
      break;
    case PsiMethod::kCoupledNewton:
      if (!is_dyadic(p, 30))
        return InvalidArgument("Psi: coupled Newton route needs a dyadic p, got " + pstr);
      break;
    default:
      break;
  }
  return method;
}

const char* PsiMethodName(PsiMethod m) {
  switch (m) {
    case PsiMethod::kAuto:
      return "auto";
    case PsiMethod::kIdentity:
      return "identity";
    case PsiMethod::kNewtonSchulz:
      return "newton_schulz";
    case PsiMethod::kCoupledNewton:
      return "coupled_newton";
    case PsiMethod::kEigh:
      return "eigh";
  }
  return "unknown";
}

template <typename T>
double GramRegularizer(const T* a, int n) {
  double tr = 0;
  for (int i = 0; i < n; ++i) tr += double(a[size_t(i) * n + i]);
  return 1e-6 + 1e-4 * tr / n;
}

template <typename T>
void NewtonSchulz(const T* o, int m, int n, int steps, T* out) {
  constexpr T a = T(3.4445), b = T(-4.7750), c = T(2.0315);
  const bool tall = m > n;
  const int r = tall ? n : m, cols = tall ? m : n;  // X: (r, cols), r <= cols
  const size_t count = size_t(m) * n;
  std::vector<T> x(count), xn(count), A(size_t(r) * r), B(size_t(r) * r);
  if (tall) {
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) x[size_t(j) * m + i] = o[size_t(i) * n + j];
  } else {
    std::copy(o, o + count, x.begin());
  }
  const T inv = T(1) / T(FrobeniusNorm(x.data(), count) + 1e-7);
  for (auto& v : x) v *= inv;
  for (int step = 0; step < steps; ++step) {
    Syrk(false, r, cols, x.data(), cols, A.data());  // A = X X^T
    MirrorUpper(A.data(), r);
    for (size_t i = 0; i < A.size(); ++i) B[i] = b * A[i];
    Gemm(false, false, r, r, r, c, A.data(), r, A.data(), r, T(1), B.data(), r);  // bA + cA^2
    for (size_t i = 0; i < count; ++i) xn[i] = a * x[i];
    Gemm(false, false, r, cols, r, T(1), B.data(), r, x.data(), cols, T(1), xn.data(), cols);
    std::swap(x, xn);
  }
  if (tall) {
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) out[size_t(i) * n + j] = x[size_t(j) * m + i];
  } else {
    std::copy(x.begin(), x.end(), out);
  }
}

template <typename T>
void CoupledNewtonSqrt(const T* a, int n, int iters, T* sqrt_out, T* invsqrt_out,
                       double* residual) {
  const size_t nn = size_t(n) * n;
  std::vector<T> y(a, a + nn), z(nn, T(0)), t(nn), yn(nn), zn(nn);
  const double delta = GramRegularizer(a, n);
  for (int i = 0; i < n; ++i) y[size_t(i) * n + i] += T(delta);
  const double s = FrobeniusNorm(y.data(), nn);
  const T inv_s = T(1.0 / s);
  for (auto& v : y) v *= inv_s;
  for (int i = 0; i < n; ++i) z[size_t(i) * n + i] = T(1);

  const int every = std::clamp(iters / 3, 1, 5);
  for (int k = 1; k <= iters; ++k) {
    Gemm(false, false, n, n, n, T(1), z.data(), n, y.data(), n, T(0), t.data(), n);  // Z Y
    for (auto& v : t) v *= T(-0.5);
    for (int i = 0; i < n; ++i) t[size_t(i) * n + i] += T(1.5);  // T = (3I - ZY) / 2
    Gemm(false, false, n, n, n, T(1), y.data(), n, t.data(), n, T(0), yn.data(), n);
    Gemm(false, false, n, n, n, T(1), t.data(), n, z.data(), n, T(0), zn.data(), n);
    std::swap(y, yn);
    std::swap(z, zn);
    // Rounding makes Y and Z drift off the symmetric matrices; left alone, the drift is amplified.
    if (k % every == 0) {
      Symmetrize(y.data(), n);
      Symmetrize(z.data(), n);
    }
  }
  Symmetrize(y.data(), n);
  Symmetrize(z.data(), n);

  if (residual) {
    Gemm(false, false, n, n, n, T(1), z.data(), n, y.data(), n, T(0), t.data(), n);
    double r2 = 0;
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) {
        double d = (i == j ? 1.0 : 0.0) - double(t[size_t(i) * n + j]);
        r2 += d * d;
      }
    *residual = std::sqrt(r2 / n);
  }
  const T root_s = T(std::sqrt(s)), inv_root_s = T(1.0 / std::sqrt(s));
  if (sqrt_out)
    for (size_t i = 0; i < nn; ++i) sqrt_out[i] = root_s * y[i];
  if (invsqrt_out)
    for (size_t i = 0; i < nn; ++i) invsqrt_out[i] = inv_root_s * z[i];
}

template <typename T>
Status SymPowEigh(const T* g, int n, double e, T* out) {
  const size_t nn = size_t(n) * n;
  std::vector<T> v(g, g + nn), w(n), scaled(nn);
  const double delta = GramRegularizer(g, n);
  lapack_int info = Syevd(n, v.data(), w.data());
  if (info != 0) return Internal("SymPowEigh: LAPACKE syevd failed, info=" + std::to_string(info));
  // v holds the eigenvectors as columns; W = V diag(lambda^{e/2}) gives out = W W^T, symmetric by
  // construction whatever the sign of e.
  for (int j = 0; j < n; ++j) {
    double lam = std::max(double(w[j]), delta);
    T d = T(std::pow(lam, 0.5 * e));
    for (int i = 0; i < n; ++i) scaled[size_t(i) * n + j] = v[size_t(i) * n + j] * d;
  }
  Syrk(false, n, n, scaled.data(), n, out);
  MirrorUpper(out, n);
  return Status::Ok();
}

template <typename T>
Status Psi(const T* o, int m, int n, double p, const PsiOptions& opt, T* out, PsiStats* stats) {
  ABLATE_ASSIGN_OR_RETURN(PsiMethod method, ResolvePsiMethod(p, opt));
  if (m < 1 || n < 1)
    return InvalidArgument("Psi: bad shape " + std::to_string(m) + "x" + std::to_string(n));
  if (!o || !out) return InvalidArgument("Psi: null matrix");
  PsiStats local;
  PsiStats* st = stats ? stats : &local;
  *st = PsiStats{};

  st->used = method;

  const size_t count = size_t(m) * n;
  if (method == PsiMethod::kIdentity || p == 1.0) {
    std::copy(o, o + count, out);
    return Status::Ok();
  }
  if (method == PsiMethod::kNewtonSchulz) {
    NewtonSchulz(o, m, n, opt.ns_steps, out);
    return Status::Ok();
  }
  const int r = std::min(m, n);
  const double e = 0.5 * (1.0 - p);
  std::vector<T> g(size_t(r) * r), f(size_t(r) * r);
  ShortGram(o, m, n, g.data());
  if (method == PsiMethod::kCoupledNewton) {
    ABLATE_RETURN_IF_ERROR(CoupledNewtonGramPower(g.data(), r, e, opt.newton_iters, f.data(), st));
  } else {
    ABLATE_RETURN_IF_ERROR(SymPowEigh(g.data(), r, -e, f.data()));
  }
  ApplyGramFactor(o, m, n, f.data(), out);
  return Status::Ok();
}

#define ABLATE_SPECTRAL_INSTANTIATE(T)                                                  \
  template double GramRegularizer<T>(const T*, int);                                    \
  template Status Psi<T>(const T*, int, int, double, const PsiOptions&, T*, PsiStats*); \
  template void NewtonSchulz<T>(const T*, int, int, int, T*);                           \
  template void CoupledNewtonSqrt<T>(const T*, int, int, T*, T*, double*);              \
  template Status SymPowEigh<T>(const T*, int, double, T*);

ABLATE_SPECTRAL_INSTANTIATE(float)
ABLATE_SPECTRAL_INSTANTIATE(double)
#undef ABLATE_SPECTRAL_INSTANTIATE

}  // namespace ablate::kernels
