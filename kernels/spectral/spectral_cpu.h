// Spectral transforms Psi_p on the CPU (kernels/ALGORITHMS.md §2.2): the reference of the GPU kernels.
//
// Psi_p(O) = U Sigma^p V^T for O = U Sigma V^T (m x n), p in [-1, 1]. It is computed without an
// SVD through the Gram matrix of the short side (always min(m, n)^2):
//   n <= m:  Psi_p(O) = O . (O^T O)^{-e}      e = (1 - p) / 2
//   n >  m:  Psi_p(O) = (O O^T)^{-e} . O
// Routes (PsiMethod):
//   kIdentity      p = 1, an exact copy.
//   kNewtonSchulz  p = 0 only: Muon's quintic Newton-Schulz. Approximate by design: the singular
//                  values land in roughly [0.6, 1.2], not at 1; the singular vectors are exact.
//   kCoupledNewton dyadic p = k / 2^j: G^{-1/2} from one coupled-Newton call, then G^{-1/4} =
//                  (G^{-1/2})^{1/2}, G^{-1/8}, ... from further calls; the factors selected by the
//                  binary digits of e are multiplied (e = 1, i.e. p = -1, is G^{-1/2} G^{-1/2}).
//                  Every call regularizes its input (see CoupledNewtonSqrt), so the result is
//                  off by ~1e-3 relative on well-conditioned O (sigma in [0.5, 2]), by a few %
//                  at cond(O) = 1e2, and by much more for p <= 0 at cond(O) = 1e4, where
//                  sigma^2 falls below delta (the tests state the bounds). PsiStats reports the
//                  iteration residual, which flags non-convergence.
//   kEigh          any p: eigendecomposition of the Gram matrix (LAPACK syevd) with eigenvalues
//                  clamped from below at the regularizer delta. Exact up to rounding where all
//                  eigenvalues exceed delta (~1e-4 of their mean). On the CPU it is also the
//                  fastest route by far (one syevd against 3K GEMMs per chained call).
//   kAuto          p == 1 identity; p == 0 Newton-Schulz; p * 2^max_dyadic_level an integer (exact
//                  floating-point test) coupled Newton; otherwise eigh.
//
// Every matrix is row-major contiguous; element (i, j) of an r x c matrix sits at i * c + j.
// T is float (the trainer) or double (tests); the arithmetic is the same, GEMMs go through cblas
// (sgemm / dgemm / syrk) and keep T accumulation.
//
// Thread safety: pure functions of their arguments (OpenBLAS may use its own threads).
// Determinism: bit-reproducible for a fixed BLAS build and thread count.
#pragma once

#include <vector>

#include "ablate/status.h"

namespace ablate::kernels {

enum class PsiMethod { kAuto, kIdentity, kNewtonSchulz, kCoupledNewton, kEigh };

const char* PsiMethodName(PsiMethod m);  // "auto", "identity", "newton_schulz", ...

struct PsiOptions {
  PsiMethod method = PsiMethod::kAuto;
  int ns_steps = 5;          // Newton-Schulz steps (5 Muon, 15 BeyondMuon)
  int newton_iters = 15;     // coupled Newton iterations per call (K)
  int max_dyadic_level = 4;  // kAuto: p = k / 2^j with j <= this goes to coupled Newton
};

struct PsiStats {
  PsiMethod used = PsiMethod::kAuto;  // the route actually taken
  int newton_calls = 0;               // coupled-Newton calls (0 unless kCoupledNewton)
  double newton_residual = 0;         // max over calls of ||I - Z Y||_F / sqrt(n) at the end
};

// Regularizer shared by the Newton and the eigh routes: delta = 1e-6 + 1e-4 * tr(A) / n.
// a: (n, n) T.
template <typename T>
double GramRegularizer(const T* a, int n);

// The route Psi takes for p under opt (kAuto resolved: p = 1 identity, p = 0 Newton-Schulz, dyadic
// p up to opt.max_dyadic_level coupled Newton, else eigh). Shared with the device optimizer so both
// backends take the same route with the same errors: InvalidArgument for p outside [-1, 1] (or
// NaN), bad options, and an explicit method that cannot produce p.
StatusOr<PsiMethod> ResolvePsiMethod(double p, const PsiOptions& opt);

// Binary digits of e in [0, 1): digits[k - 1] is the coefficient of 2^{-k} (the coupled Newton
// chain). False when e needs more than max_bits digits (not dyadic at that level).
bool DyadicDigits(double e, int max_bits, std::vector<int>* digits);

// out = Psi_p(o). o: (m, n) T; out: (m, n) T, must not alias o.
// Errors: InvalidArgument for p outside [-1, 1] (or NaN), m or n < 1, null pointers, bad options,
// and an explicit method that cannot produce p (kIdentity with p != 1, kNewtonSchulz with p != 0,
// kCoupledNewton with a non-dyadic p or a level above 30). Internal when LAPACK fails.
// An all-zero o maps to an all-zero out on every route.
template <typename T>
Status Psi(const T* o, int m, int n, double p, const PsiOptions& opt, T* out,
           PsiStats* stats = nullptr);

// Muon's Newton-Schulz for the polar factor (p = 0). o: (m, n) T; out: (m, n) T (may alias o).
// X = O / (||O||_F + 1e-7), transposed to the wide orientation (rows <= cols); `steps` times
// A = X X^T, X <- a X + (b A + c A^2) X with (a, b, c) = (3.4445, -4.7750, 2.0315).
template <typename T>
void NewtonSchulz(const T* o, int m, int n, int steps, T* out);

// Coupled Newton iteration for a symmetric positive (semi)definite a: (n, n) T.
//   A^ = A + delta I (GramRegularizer), s = ||A^||_F, Y0 = A^ / s, Z0 = I; K = iters times:
//   T = (3I - Z Y) / 2, Y <- Y T, Z <- T Z; Y and Z are symmetrized (M <- (M + M^T) / 2) after
//   every clamp(floor(K / 3), 1, 5)-th iteration and once more at the end.
// sqrt_out ~ A^{1/2} = sqrt(s) Y, invsqrt_out ~ A^{-1/2} = Z / sqrt(s): (n, n) T each; either may
// be null. residual (optional) = ||I - Z Y||_F / sqrt(n) after the last symmetrization.
// Since s >= lambda_max(A^), the spectrum of Y0 lies in (0, 1], inside the iteration's region of
// convergence (0, 3); eigenvalues far below s (ill-conditioning, large n) need more iterations.
template <typename T>
void CoupledNewtonSqrt(const T* a, int n, int iters, T* sqrt_out, T* invsqrt_out,
                       double* residual = nullptr);

// out = G^e for a symmetric PSD g: (n, n) T, via LAPACKE syevd; eigenvalues below
// delta = GramRegularizer(g) are raised to delta. out: (n, n) T, exactly symmetric (W W^T with
// W = V diag(lambda^{e/2})). Errors: Internal when LAPACK fails (out is then untouched).
template <typename T>
Status SymPowEigh(const T* g, int n, double e, T* out);

}  // namespace ablate::kernels
