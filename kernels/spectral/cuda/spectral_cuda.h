// Psi_p on the GPU, batched over same-shape matrices: the device twin of kernels/spectral/
// spectral_cpu.h (kernels/ALGORITHMS.md §2.2), same routes, coefficients, iteration counts and chain.
//
// A plan serves a fixed list of groups; group g holds `count` row-major (m, n) fp32 matrices back
// to back in device memory. Routes (chosen from p and PsiOptions exactly as kernels::Psi does):
//   identity        p = 1: a copy.
//   newton_schulz   per group: X = O / (||O||_F + 1e-7) in the wide orientation (no transpose is
//                   materialized: a tall O is read as the column-major wide X), then ns_steps times
//                   A = X X^T, B = b A + c A^2, X <- a X + B X: three strided-batched GEMMs whose
//                   b A and a X terms are the GEMM's C input (cublasLt, C != D), ping-ponging
//                   between the input and the output buffer.
//   coupled_newton  Gram matrices of the short side (r = min(m, n)) of every group land in one
//                   r-batch per distinct r (GPT: every hidden matrix has r = d_model, so all of
//                   them form one batch); each chained CoupledNewtonSqrt runs on the whole r-batch:
//                   trace, regularizer, Frobenius norm and scaling on the device, then K iterations
//                   of three strided-batched GEMMs, P = Z Y, Y <- 1.5 Y - 0.5 Y P (= Y T with
//                   T = (3I - ZY) / 2), Z <- 1.5 Z - 0.5 P Z (= T Z), the 1.5 terms in the GEMM
//                   epilogue, with the symmetrization schedule of the CPU; the factors picked by
//                   the binary digits of (1 - p) / 2 are multiplied as on the CPU; out = O F or
//                   F O per group.
//   eigh            the same Gram batch, cuSOLVER syevd (cusolverDnXsyevBatched where the library
//                   takes the size, else one Xsyevd per matrix), eigenvalues clamped at the
//                   regularizer, F = W W^T with W = V diag(lambda^{-e/2}).
// Every norm, trace and scale stays on the device: no host synchronization inside the iterations
// (cuSOLVER may synchronize inside syevd). Reductions run in double, in a fixed order (results
// are deterministic run to run on one GPU).
// GEMMs: cublasLt, fp32 (CUBLAS_COMPUTE_32F), or with TF32 on CUBLAS_COMPUTE_32F_FAST_TF32 (TF32
// tensor-core products, fp32 accumulation and epilogue) for every GEMM except the residual's.
//
// Work space (allocated by Create): six buffers of the largest r-batch (sum of count * r * r
// floats over the groups sharing r), 32 MiB of cublasLt work space, small per-matrix arrays; the
// inputs double as scratch.
// Built with --fmad=false (kernels/spectral/cuda/CMakeLists.txt): the elementwise kernels and the
// double reductions round as the CPU expressions they mirror.
// Thread safety: not thread-safe; one plan per optimizer.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <vector>

#include "ablate/status.h"
#include "spectral/spectral_cpu.h"

namespace ablate::kernels::cuda {

struct PsiGroup {
  int m = 0, n = 0, count = 0;  // count row-major (m, n) matrices
};

class BatchedPsi {
 public:
  // Errors: InvalidArgument for empty or non-positive groups; Internal for allocation and library
  // failures (the message names the bytes asked for).
  static StatusOr<std::unique_ptr<BatchedPsi>> Create(const std::vector<PsiGroup>& groups,
                                                      cudaStream_t stream, bool tf32);
  ~BatchedPsi();
  BatchedPsi(const BatchedPsi&) = delete;
  BatchedPsi& operator=(const BatchedPsi&) = delete;

  // out[g] = Psi_p(in[g]) matrix by matrix, for every group of the plan. in[g]: (count, m, n) fp32
  // device, used as work space (its contents are lost, except on the identity route); out[g]: same
  // shape, must not alias in[g]. want_residual: record max ||I - ZY||_F / sqrt(r) per matrix over
  // the coupled-Newton calls of this run (one extra GEMM per call), read with ResidualMax().
  // Enqueues on the stream; returns the route taken: kernels::ResolvePsiMethod's, the CPU's own
  // resolution, so both backends agree (its errors otherwise).
  StatusOr<kernels::PsiMethod> Run(const std::vector<float*>& in, const std::vector<float*>& out,
                                   double p, const kernels::PsiOptions& opt, bool want_residual);

  // Synchronizes the stream. Max residual of the last Run with want_residual (0 when none), and
  // Internal when an eigendecomposition of the last eigh Run failed (info != 0).
  StatusOr<double> ResidualMax();
  Status CheckEigh();

  bool tf32() const;
  bool eigh_batched() const;  // cusolverDnXsyevBatched (true) or one Xsyevd per matrix
  size_t workspace_bytes() const;

  struct Impl;

 private:
  explicit BatchedPsi(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ablate::kernels::cuda
