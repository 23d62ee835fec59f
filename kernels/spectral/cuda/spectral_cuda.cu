// Batched Psi_p on the GPU (spectral_cuda.h). The CPU twin is kernels/spectral/spectral_cpu.cc;
// each step below names the CPU line it mirrors.
//
// Layout: the inputs are row-major (m, n) matrices, which cuBLAS (column-major) sees as their
// transposes O^T (n, m) with leading dimension n; every GEMM below is written for that view, so no
// transpose is ever materialized. The r x r work matrices (Gram, Y, Z, T, F) are column-major; all
// of them are symmetric up to rounding and are symmetrized where the CPU symmetrizes.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cusolverDn.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "ablate/cuda_status.h"
#include "cuda_block.cuh"
#include "spectral/cuda/spectral_cuda.h"

namespace ablate::kernels::cuda {
namespace {

constexpr int kParts = 64;  // partial sums per matrix for Frobenius norms (fixed: deterministic)

// ---- kernels ---------------------------------------------------------------------------------

// parts[b * kParts + blockIdx.x] = sum of squares over slice blockIdx.x of matrix b = blockIdx.y
// (x: (count, per) fp32). kMinusIdentity: of (I - x) instead, x being (r, r).
template <bool kMinusIdentity>
__global__ void SumSquaresParts(const float* __restrict__ x, int64_t per, int r,
                                double* __restrict__ parts) {
  const int b = blockIdx.y, part = blockIdx.x;
  const float* xb = x + int64_t(b) * per;
  const int64_t chunk = (per + kParts - 1) / kParts;
  const int64_t lo = part * chunk, hi = min(per, lo + chunk);
  double s = 0;
  for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    double v = double(xb[i]);
    if (kMinusIdentity) v = (i % (r + 1) == 0 ? 1.0 : 0.0) - v;
    s += v * v;
  }
  s = BlockSumDouble(s);
  if (threadIdx.x == 0) parts[int64_t(b) * kParts + part] = s;
}

// mode 0: out[b] = sqrt(sum of parts)  (Frobenius norm)
// mode 1: out[b] = max(out[b], sqrt(sum / r))  (CoupledNewtonSqrt's residual, max over calls)
__global__ void FinishSums(const double* __restrict__ parts, int count, int mode, int r,
                           double* __restrict__ out) {
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= count) return;
  double s = 0;
  for (int p = 0; p < kParts; ++p) s += parts[int64_t(b) * kParts + p];
  if (mode == 0) {
    out[b] = sqrt(s);
  } else {
    out[b] = fmax(out[b], sqrt(s / r));
  }
}

// NewtonSchulz: X = O / (||O||_F + 1e-7), inv computed in float as on the CPU.
__global__ void ScaleInvNorm(const float* in, float* out, int64_t per,
                             const double* __restrict__ norm) {
  const int b = blockIdx.y;
  const float inv = 1.0f / float(norm[b] + 1e-7);
  const int64_t base = int64_t(b) * per;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < per;
       i += int64_t(gridDim.x) * blockDim.x)
    out[base + i] = in[base + i] * inv;
}

// GramRegularizer: delta[b] = 1e-6 + 1e-4 tr(A_b) / r. One block per matrix.
__global__ void TraceDelta(const float* __restrict__ A, int r, double* __restrict__ delta) {
  const float* a = A + int64_t(blockIdx.x) * r * r;
  double s = 0;
  for (int i = threadIdx.x; i < r; i += blockDim.x) s += double(a[int64_t(i) * (r + 1)]);
  s = BlockSumDouble(s);
  if (threadIdx.x == 0) delta[blockIdx.x] = 1e-6 + 1e-4 * s / r;
}

// CoupledNewtonSqrt: y_ii += float(delta), in place.
__global__ void AddDiag(float* Y, int r, const double* __restrict__ delta) {
  const int b = blockIdx.y;
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < r) Y[int64_t(b) * r * r + int64_t(i) * (r + 1)] += float(delta[b]);
}

// CoupledNewtonSqrt: Y *= float(1 / s), Z = I.
__global__ void ScaleAndIdentity(float* Y, float* Z, int r, const double* __restrict__ s) {
  const int64_t per = int64_t(r) * r, base = int64_t(blockIdx.y) * per;
  const float inv_s = float(1.0 / s[blockIdx.y]);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < per;
       i += int64_t(gridDim.x) * blockDim.x) {
    Y[base + i] *= inv_s;
    Z[base + i] = i % (r + 1) == 0 ? 1.0f : 0.0f;
  }
}

// M <- (M + M^T) / 2 for the matrices of X (blockIdx.y: the matrix; blockIdx.z = 1: X2's), by
// 32 x 32 tile pairs through shared memory (both tiles read coalesced; blockIdx.x: the pair,
// nt x nt of them). Block (32, 8).
__global__ void SymmetrizeTiles(float* X, float* X2, int r, int nt) {
  const int ti = int(blockIdx.x) / nt, tj = int(blockIdx.x) % nt;
  if (ti > tj) return;
  float* M = (blockIdx.z == 0 ? X : X2) + int64_t(blockIdx.y) * r * r;
  __shared__ float P[32][33], Q[32][33];
  const int tx = threadIdx.x;
  for (int k = threadIdx.y; k < 32; k += 8) {
    const int row = ti * 32 + k, col = tj * 32 + tx;
    if (row < r && col < r) P[k][tx] = M[int64_t(row) * r + col];
    const int row2 = tj * 32 + k, col2 = ti * 32 + tx;
    if (row2 < r && col2 < r) Q[k][tx] = M[int64_t(row2) * r + col2];
  }
  __syncthreads();
  for (int k = threadIdx.y; k < 32; k += 8) {
    const int row = ti * 32 + k, col = tj * 32 + tx;
    if (row < r && col < r) M[int64_t(row) * r + col] = 0.5f * (P[k][tx] + Q[tx][k]);
    const int row2 = tj * 32 + k, col2 = ti * 32 + tx;
    if (row2 < r && col2 < r) M[int64_t(row2) * r + col2] = 0.5f * (Q[k][tx] + P[tx][k]);
  }
}

// CoupledNewtonSqrt outputs: mode 0: X *= float(sqrt(s)); mode 1: X *= float(1 / sqrt(s)).
__global__ void ScaleByRoot(float* X, int64_t per, const double* __restrict__ s, int mode) {
  const int64_t base = int64_t(blockIdx.y) * per;
  const double rs = sqrt(s[blockIdx.y]);
  const float f = mode == 0 ? float(rs) : float(1.0 / rs);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < per;
       i += int64_t(gridDim.x) * blockDim.x)
    X[base + i] *= f;
}

// SymPowEigh: w[b, j] <- float(max(w, delta_b)^half_e). w: (count, r).
__global__ void EigPow(float* w, int r, int count, const double* __restrict__ delta,
                       double half_e) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= int64_t(r) * count) return;
  const double lam = fmax(double(w[i]), delta[i / r]);
  w[i] = float(pow(lam, half_e));
}

// SymPowEigh: S(:, j) = V(:, j) * d_j (column-major eigenvectors).
__global__ void EigScaleCols(const float* __restrict__ V, const float* __restrict__ d,
                             float* __restrict__ S, int r) {
  const int64_t per = int64_t(r) * r, base = int64_t(blockIdx.y) * per;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < per;
       i += int64_t(gridDim.x) * blockDim.x)
    S[base + i] = V[base + i] * d[int64_t(blockIdx.y) * r + i / r];
}

// ---- host helpers ----------------------------------------------------------------------------

Status BlasStatus(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  return Internal(std::string(what) + ": " + cublasGetStatusName(s));
}

Status SolverStatus(cusolverStatus_t s, const char* what) {
  if (s == CUSOLVER_STATUS_SUCCESS) return Status::Ok();
  return Internal(std::string(what) + ": cuSOLVER status " + std::to_string(int(s)));
}

struct GroupPlan {
  PsiGroup g;
  int r = 0;
  int rbatch = 0;  // index into rbatches
  int offset = 0;  // first matrix of this group inside its r-batch
};

// One cached cublasLt matmul configuration (descriptors and the heuristic's algorithm).
struct LtKey {
  bool ta, tb;
  int m, n, k, lda, ldb, ldc, batch;
  int64_t sa, sb, sc;
  uint32_t align;
  cublasComputeType_t compute;
  bool operator==(const LtKey& o) const {
    return ta == o.ta && tb == o.tb && m == o.m && n == o.n && k == o.k && lda == o.lda &&
           ldb == o.ldb && ldc == o.ldc && batch == o.batch && sa == o.sa && sb == o.sb &&
           sc == o.sc && align == o.align && compute == o.compute;
  }
};

struct LtPlan {
  LtKey key;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo;
};

// Largest power of two (<= 256) dividing every address and byte stride.
uint32_t Alignment(std::initializer_list<uint64_t> values) {
  uint32_t a = 256;
  for (uint64_t v : values)
    while (a > 4 && v % a != 0) a >>= 1;
  return a;
}

struct RBatchPlan {
  int r = 0;
  int count = 0;  // matrices
  int base = 0;   // first matrix in the global residual array
};

}  // namespace

struct BatchedPsi::Impl {
  cudaStream_t stream = nullptr;
  bool tf32 = false;
  cublasLtHandle_t lt = nullptr;
  void* lt_work = nullptr;
  static constexpr size_t kLtWorkBytes = size_t(32) << 20;
  std::vector<LtPlan> lt_plans;
  cusolverDnHandle_t solver = nullptr;
  cusolverDnParams_t solver_params = nullptr;
  bool eigh_batched = true;
  std::vector<GroupPlan> groups;
  std::vector<RBatchPlan> rbatches;
  int total = 0;
  size_t workspace_bytes = 0;

  static constexpr int kPool = 6;
  float* pool[kPool] = {};
  int64_t pool_elems = 0;    // floats per pool buffer
  double* parts = nullptr;   // (max_count, kParts)
  double* norms = nullptr;   // (max_count)
  double* delta = nullptr;   // (max_count)
  double* svals = nullptr;   // (max_count)
  double* resmax = nullptr;  // (total)
  float* eig_w = nullptr;    // (max r-batch count, r)
  int* eig_info = nullptr;   // (total): r-batch b's at rbatches[b].base
  void* solver_work = nullptr;
  size_t solver_work_bytes = 0;
  std::vector<char> solver_host_work;
  bool residual_valid = false;
  bool eigh_ran = false;
  std::vector<void*> allocations;

  ~Impl() {
    for (void* p : allocations) cudaFree(p);
    if (solver_params) cusolverDnDestroyParams(solver_params);
    if (solver) cusolverDnDestroy(solver);
    for (auto& p : lt_plans) {
      cublasLtMatrixLayoutDestroy(p.a);
      cublasLtMatrixLayoutDestroy(p.b);
      cublasLtMatrixLayoutDestroy(p.c);
      cublasLtMatmulDescDestroy(p.desc);
    }
    if (lt) cublasLtDestroy(lt);
  }

  Status Alloc(void** p, size_t bytes, const char* what) {
    ABLATE_RETURN_IF_ERROR(DeviceAlloc(p, bytes, what));
    if (*p) allocations.push_back(*p);
    workspace_bytes += bytes;
    return Status::Ok();
  }

  // Column-major strided-batched D = alpha op(A) op(B) + beta C through cublasLt (C may differ
  // from D: the CPU's "a X + B X" and "(3I - ZY)/2" terms become GEMM epilogues, no elementwise
  // pass). op(A): (m, k), op(B): (k, n), C and D: (m, n) with leading dimension ldc; C null means
  // beta = 0. exact_fp32 forces fp32 products even with TF32 on (the residual).
  Status Matmul(bool ta, bool tb, int m, int n, int k, float alpha, const float* A, int lda,
                int64_t sa, const float* B, int ldb, int64_t sb, float beta, const float* C,
                float* D, int ldc, int64_t sc, int batch, bool exact_fp32 = false) {
    if (!C) {
      C = D;
      beta = 0.0f;
    }
    LtKey key{ta,    tb,
              m,     n,
              k,     lda,
              ldb,   ldc,
              batch, sa,
              sb,    sc,
              0,     tf32 && !exact_fp32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F};
    key.align = Alignment(
        {uint64_t(reinterpret_cast<uintptr_t>(A)), uint64_t(reinterpret_cast<uintptr_t>(B)),
         uint64_t(reinterpret_cast<uintptr_t>(C)), uint64_t(reinterpret_cast<uintptr_t>(D)),
         uint64_t(sa) * 4, uint64_t(sb) * 4, uint64_t(sc) * 4});
    const LtPlan* plan = nullptr;
    for (const auto& p : lt_plans)
      if (p.key == key) plan = &p;
    if (!plan) {
      ABLATE_ASSIGN_OR_RETURN(LtPlan p, MakePlan(key));
      lt_plans.push_back(p);
      plan = &lt_plans.back();
    }
    return BlasStatus(
        cublasLtMatmul(lt, plan->desc, &alpha, A, plan->a, B, plan->b, &beta, C, plan->c, D,
                       plan->c, &plan->algo, lt_work, kLtWorkBytes, stream),
        "spectral (cuda): cublasLtMatmul");
  }

  StatusOr<LtPlan> MakePlan(const LtKey& key) {
    const char* what = "spectral (cuda): cublasLt plan";
    LtPlan p;
    p.key = key;
    ABLATE_RETURN_IF_ERROR(
        BlasStatus(cublasLtMatmulDescCreate(&p.desc, key.compute, CUDA_R_32F), what));
    const cublasOperation_t opa = key.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t opb = key.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    ABLATE_RETURN_IF_ERROR(BlasStatus(
        cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)),
        what));
    ABLATE_RETURN_IF_ERROR(BlasStatus(
        cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)),
        what));
    auto layout = [&](cublasLtMatrixLayout_t* l, int rows, int cols, int ld,
                      int64_t stride) -> Status {
      ABLATE_RETURN_IF_ERROR(
          BlasStatus(cublasLtMatrixLayoutCreate(l, CUDA_R_32F, rows, cols, ld), what));
      const int32_t batch = key.batch;
      ABLATE_RETURN_IF_ERROR(
          BlasStatus(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                      &batch, sizeof(batch)),
                     what));
      return BlasStatus(
          cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                           sizeof(stride)),
          what);
    };
    // Stored shapes: A is (m, k), or (k, m) transposed; B is (k, n), or (n, k).
    ABLATE_RETURN_IF_ERROR(
        layout(&p.a, key.ta ? key.k : key.m, key.ta ? key.m : key.k, key.lda, key.sa));
    ABLATE_RETURN_IF_ERROR(
        layout(&p.b, key.tb ? key.n : key.k, key.tb ? key.k : key.n, key.ldb, key.sb));
    ABLATE_RETURN_IF_ERROR(layout(&p.c, key.m, key.n, key.ldc, key.sc));
    cublasLtMatmulPreference_t pref = nullptr;
    ABLATE_RETURN_IF_ERROR(BlasStatus(cublasLtMatmulPreferenceCreate(&pref), what));
    const uint64_t ws = kLtWorkBytes;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                         sizeof(ws));
    for (auto attr :
         {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
      cublasLtMatmulPreferenceSetAttribute(pref, attr, &key.align, sizeof(key.align));
    cublasLtMatmulHeuristicResult_t res{};
    int found = 0;
    cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(lt, p.desc, p.a, p.b, p.c, p.c, pref, 1, &res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
      return Internal("spectral (cuda): no cublasLt algorithm for a " + std::to_string(key.m) +
                      "x" + std::to_string(key.n) + "x" + std::to_string(key.k) + " batch of " +
                      std::to_string(key.batch) + " (" + cublasGetStatusName(st) + ")");
    }
    p.algo = res.algo;
    return p;
  }

  // Square (r, r) batch: D = alpha op(A) op(B) + beta C.
  Status SqMatmul(const float* A, const float* B, float* D, int r, int count, bool tb = false,
                  float alpha = 1.0f, float beta = 0.0f, const float* C = nullptr,
                  bool exact_fp32 = false) {
    const int64_t rr = int64_t(r) * r;
    return Matmul(false, tb, r, r, r, alpha, A, r, rr, B, r, rr, beta, C, D, r, rr, count,
                  exact_fp32);
  }

  // Frobenius norm of each of count matrices of `per` floats -> out (double, device).
  void Norms(const float* x, int64_t per, int count, double* out) {
    SumSquaresParts<false><<<dim3(kParts, count), kThreads, 0, stream>>>(x, per, 0, parts);
    FinishSums<<<(count + 127) / 128, 128, 0, stream>>>(parts, count, 0, 0, out);
  }

  // count <= 65535 on gridDim.y (BatchedPsi::Create checks it); X2's matrices on gridDim.z = 1,
  // not as blocks count.. of X's (2 count could pass the limit).
  void Symmetrize(float* X, float* X2, int r, int count) {
    const int nt = (r + 31) / 32;
    SymmetrizeTiles<<<dim3(nt * nt, count, X2 ? 2 : 1), dim3(32, 8), 0, stream>>>(X, X2, r, nt);
  }

  // A pool buffer not in `busy`.
  float* Pick(std::initializer_list<const float*> busy) {
    for (float* p : pool) {
      if (std::find(busy.begin(), busy.end(), p) == busy.end()) return p;
    }
    return nullptr;  // unreachable: callers never hold more than kPool - 1 buffers
  }

  Status NewtonSchulz(float* in, float* out, const GroupPlan& gp, int steps) {
    const int m = gp.g.m, n = gp.g.n, count = gp.g.count;
    const bool tall = m > n;
    const int r = tall ? n : m, cols = tall ? m : n;
    const int64_t per = int64_t(m) * n, rr = int64_t(r) * r;
    constexpr float a = 3.4445f, b = -4.7750f, c = 2.0315f;
    float* A = pool[0];
    float* B = pool[1];
    Norms(in, per, count, norms);
    float* x = steps % 2 == 0 ? out : in;  // so that the last step writes `out`
    float* xn = x == out ? in : out;
    ScaleInvNorm<<<dim3(GridFor(per, 1024), count), kThreads, 0, stream>>>(in, x, per, norms);
    for (int s = 0; s < steps; ++s) {
      if (tall) {  // x: the column-major (r, cols) wide matrix
        ABLATE_RETURN_IF_ERROR(Matmul(false, true, r, r, cols, 1.0f, x, r, per, x, r, per, 0.0f,
                                      nullptr, A, r, rr, count));
      } else {  // x: column-major (cols, r), the transpose of the wide matrix
        ABLATE_RETURN_IF_ERROR(Matmul(true, false, r, r, cols, 1.0f, x, cols, per, x, cols, per,
                                      0.0f, nullptr, A, r, rr, count));
      }
      ABLATE_RETURN_IF_ERROR(SqMatmul(A, A, B, r, count, false, c, b, A));  // B = b A + c A^2
      if (tall) {                                                           // X <- a X + B X
        ABLATE_RETURN_IF_ERROR(
            Matmul(false, false, r, cols, r, 1.0f, B, r, rr, x, r, per, a, x, xn, r, per, count));
      } else {  // X^T <- a X^T + X^T B^T
        ABLATE_RETURN_IF_ERROR(Matmul(false, true, cols, r, r, 1.0f, x, cols, per, B, r, rr, a, x,
                                      xn, cols, per, count));
      }
      std::swap(x, xn);
    }
    return Status::Ok();
  }

  // One CoupledNewtonSqrt over `count` (r, r) matrices held in `a` (consumed: it becomes Y).
  // `acc` is a live buffer the call must not touch. Returns the buffer holding sqrt (want_sqrt)
  // or invsqrt.
  StatusOr<float*> NewtonCall(float* a, const float* acc, int r, int count, int iters,
                              bool want_sqrt, double* res_out) {
    const int64_t rr = int64_t(r) * r;
    float* y = a;
    float* z = Pick({a, acc});
    float* t = Pick({a, acc, z});
    float* yn = Pick({a, acc, z, t});
    float* zn = Pick({a, acc, z, t, yn});
    const dim3 grid(GridFor(rr, 1024), count);
    TraceDelta<<<count, kThreads, 0, stream>>>(y, r, delta);
    AddDiag<<<dim3((r + kThreads - 1) / kThreads, count), kThreads, 0, stream>>>(y, r, delta);
    Norms(y, rr, count, svals);
    ScaleAndIdentity<<<grid, kThreads, 0, stream>>>(y, z, r, svals);
    const int every = std::clamp(iters / 3, 1, 5);
    for (int k = 1; k <= iters; ++k) {
      // With P = Z Y and T = (3I - P) / 2: Y T = 1.5 Y - 0.5 Y P and T Z = 1.5 Z - 0.5 P Z.
      ABLATE_RETURN_IF_ERROR(SqMatmul(z, y, t, r, count));                          // P
      ABLATE_RETURN_IF_ERROR(SqMatmul(y, t, yn, r, count, false, -0.5f, 1.5f, y));  // Y T
      ABLATE_RETURN_IF_ERROR(SqMatmul(t, z, zn, r, count, false, -0.5f, 1.5f, z));  // T Z
      std::swap(y, yn);
      std::swap(z, zn);
      if (k % every == 0) Symmetrize(y, z, r, count);
    }
    if (iters % every != 0) Symmetrize(y, z, r, count);  // the CPU's final pass (idempotent)
    if (res_out) {
      ABLATE_RETURN_IF_ERROR(SqMatmul(z, y, t, r, count, false, 1.0f, 0.0f, nullptr, true));
      SumSquaresParts<true><<<dim3(kParts, count), kThreads, 0, stream>>>(t, rr, r, parts);
      FinishSums<<<(count + 127) / 128, 128, 0, stream>>>(parts, count, 1, r, res_out);
    }
    float* result = want_sqrt ? y : z;
    ScaleByRoot<<<grid, kThreads, 0, stream>>>(result, rr, svals, want_sqrt ? 0 : 1);
    return result;
  }

  // CoupledNewtonGramPower over an r-batch whose Gram matrices sit in pool[0]: F = G^{-e}.
  StatusOr<float*> NewtonChain(const RBatchPlan& rb, double e, int iters, bool want_residual) {
    const int r = rb.r, count = rb.count;
    double* res = want_residual ? resmax + rb.base : nullptr;
    ABLATE_ASSIGN_OR_RETURN(float* root, NewtonCall(pool[0], nullptr, r, count, iters, false, res));
    if (e == 1.0) {
      float* f = Pick({root});
      ABLATE_RETURN_IF_ERROR(SqMatmul(root, root, f, r, count));
      Symmetrize(f, nullptr, r, count);
      return f;
    }
    std::vector<int> digits;
    if (!kernels::DyadicDigits(e, 62, &digits))
      return InvalidArgument("coupled Newton: exponent not dyadic");
    float* acc = nullptr;
    for (size_t k = 0; k < digits.size(); ++k) {
      if (k > 0) {
        ABLATE_ASSIGN_OR_RETURN(root, NewtonCall(root, acc, r, count, iters, true, res));
      }
      if (!digits[k]) continue;
      if (!acc && k + 1 == digits.size()) {
        acc = root;  // the only factor: no copy (no further call will overwrite it)
      } else if (!acc) {
        acc = Pick({root});
        ABLATE_RETURN_IF_ERROR(
            CudaStatus(cudaMemcpyAsync(acc, root, sizeof(float) * int64_t(r) * r * count,
                                       cudaMemcpyDeviceToDevice, stream),
                       "spectral (cuda): copy of a chain factor"));
      } else {
        float* tmp = Pick({root, acc});
        ABLATE_RETURN_IF_ERROR(SqMatmul(acc, root, tmp, r, count));
        acc = tmp;
      }
    }
    Symmetrize(acc, nullptr, r, count);
    return acc;
  }

  Status Syevd(float* g, int r, int count, int* info) {
    if (eigh_batched) {
      cusolverStatus_t s = cusolverDnXsyevBatched(
          solver, solver_params, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_LOWER, r, CUDA_R_32F, g,
          r, CUDA_R_32F, eig_w, CUDA_R_32F, solver_work, solver_work_bytes,
          solver_host_work.empty() ? nullptr : solver_host_work.data(), solver_host_work.size(),
          info, count);
      if (s == CUSOLVER_STATUS_SUCCESS) return Status::Ok();
      eigh_batched = false;  // this library does not take this size batched: one call each
    }
    for (int i = 0; i < count; ++i) {
      ABLATE_RETURN_IF_ERROR(SolverStatus(
          cusolverDnXsyevd(solver, solver_params, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_LOWER,
                           r, CUDA_R_32F, g + int64_t(i) * r * r, r, CUDA_R_32F,
                           eig_w + int64_t(i) * r, CUDA_R_32F, solver_work, solver_work_bytes,
                           solver_host_work.empty() ? nullptr : solver_host_work.data(),
                           solver_host_work.size(), info + i),
          "spectral (cuda): cusolverDnXsyevd"));
    }
    return Status::Ok();
  }

  // SymPowEigh(G, r, -e) over the r-batch in pool[0].
  StatusOr<float*> Eigh(const RBatchPlan& rb, double e) {
    const int r = rb.r, count = rb.count;
    const int64_t rr = int64_t(r) * r;
    float* g = pool[0];
    TraceDelta<<<count, kThreads, 0, stream>>>(g, r, delta);
    ABLATE_RETURN_IF_ERROR(Syevd(g, r, count, eig_info + rb.base));
    EigPow<<<GridFor(int64_t(r) * count, 1 << 20), kThreads, 0, stream>>>(eig_w, r, count, delta,
                                                                          0.5 * -e);
    float* s = Pick({g});
    EigScaleCols<<<dim3(GridFor(rr, 1024), count), kThreads, 0, stream>>>(g, eig_w, s, r);
    float* f = Pick({g, s});
    ABLATE_RETURN_IF_ERROR(SqMatmul(s, s, f, r, count, /*tb=*/true));  // F = S S^T
    Symmetrize(f, nullptr, r, count);
    eigh_ran = true;
    return f;
  }
};

BatchedPsi::BatchedPsi(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
BatchedPsi::~BatchedPsi() = default;
bool BatchedPsi::tf32() const { return impl_->tf32; }
bool BatchedPsi::eigh_batched() const { return impl_->eigh_batched; }
size_t BatchedPsi::workspace_bytes() const { return impl_->workspace_bytes; }

StatusOr<std::unique_ptr<BatchedPsi>> BatchedPsi::Create(const std::vector<PsiGroup>& groups,
                                                         cudaStream_t stream, bool tf32) {
  if (groups.empty()) return InvalidArgument("BatchedPsi: no groups");
  auto impl = std::make_unique<Impl>();
  Impl& d = *impl;
  d.stream = stream;
  d.tf32 = tf32;
  int max_count = 1;
  for (const PsiGroup& g : groups) {
    if (g.m < 1 || g.n < 1 || g.count < 1)
      return InvalidArgument("BatchedPsi: bad group " + std::to_string(g.count) + " x (" +
                             std::to_string(g.m) + ", " + std::to_string(g.n) + ")");
    if (g.count > 65535) return InvalidArgument("BatchedPsi: more than 65535 matrices in a group");
    GroupPlan gp;
    gp.g = g;
    gp.r = std::min(g.m, g.n);
    auto it = std::find_if(d.rbatches.begin(), d.rbatches.end(),
                           [&](const RBatchPlan& rb) { return rb.r == gp.r; });
    if (it == d.rbatches.end()) {
      d.rbatches.push_back({gp.r, 0, 0});
      it = d.rbatches.end() - 1;
    }
    gp.rbatch = int(it - d.rbatches.begin());
    gp.offset = it->count;
    it->count += g.count;
    d.groups.push_back(gp);
    max_count = std::max(max_count, g.count);
  }
  for (auto& rb : d.rbatches) {
    if (rb.count > 65535)
      return InvalidArgument("BatchedPsi: more than 65535 matrices of one size");
    rb.base = d.total;
    d.total += rb.count;
    max_count = std::max(max_count, rb.count);
    d.pool_elems = std::max(d.pool_elems, int64_t(rb.count) * rb.r * rb.r);
  }
  int max_r = 0, max_rb_count = 0;
  for (const auto& rb : d.rbatches) {
    max_r = std::max(max_r, rb.r);
    max_rb_count = std::max(max_rb_count, rb.count);
  }

  ABLATE_RETURN_IF_ERROR(BlasStatus(cublasLtCreate(&d.lt), "spectral (cuda): cublasLtCreate"));
  ABLATE_RETURN_IF_ERROR(d.Alloc(&d.lt_work, Impl::kLtWorkBytes, "spectral (cuda): cublasLt work"));

  for (auto& p : d.pool) {
    ABLATE_RETURN_IF_ERROR(d.Alloc(reinterpret_cast<void**>(&p), sizeof(float) * d.pool_elems,
                                   "spectral (cuda): work matrices"));
  }
  ABLATE_RETURN_IF_ERROR(d.Alloc(reinterpret_cast<void**>(&d.parts),
                                 sizeof(double) * kParts * max_count, "spectral (cuda): sums"));
  for (double** p : {&d.norms, &d.delta, &d.svals}) {
    ABLATE_RETURN_IF_ERROR(d.Alloc(reinterpret_cast<void**>(p), sizeof(double) * max_count,
                                   "spectral (cuda): per-matrix scalars"));
  }
  ABLATE_RETURN_IF_ERROR(d.Alloc(reinterpret_cast<void**>(&d.resmax), sizeof(double) * d.total,
                                 "spectral (cuda): residuals"));
  ABLATE_RETURN_IF_ERROR(
      CudaStatus(cudaMemset(d.resmax, 0, sizeof(double) * d.total), "spectral (cuda): cudaMemset"));
  ABLATE_RETURN_IF_ERROR(d.Alloc(reinterpret_cast<void**>(&d.eig_w),
                                 sizeof(float) * int64_t(max_r) * max_rb_count,
                                 "spectral (cuda): eigenvalues"));
  ABLATE_RETURN_IF_ERROR(d.Alloc(reinterpret_cast<void**>(&d.eig_info), sizeof(int) * d.total,
                                 "spectral (cuda): eigh info"));

  // cuSOLVER for the eigh route: size the work space for the batched call where the library takes
  // it, and for the one-matrix fallback in any case.
  ABLATE_RETURN_IF_ERROR(
      SolverStatus(cusolverDnCreate(&d.solver), "spectral (cuda): cusolverDnCreate"));
  ABLATE_RETURN_IF_ERROR(
      SolverStatus(cusolverDnSetStream(d.solver, stream), "spectral (cuda): cusolverDnSetStream"));
  ABLATE_RETURN_IF_ERROR(SolverStatus(cusolverDnCreateParams(&d.solver_params),
                                      "spectral (cuda): cusolverDnCreateParams"));
  size_t dev_bytes = 0, host_bytes = 0;
  for (const auto& rb : d.rbatches) {
    size_t db = 0, hb = 0;
    if (d.eigh_batched && cusolverDnXsyevBatched_bufferSize(
                              d.solver, d.solver_params, CUSOLVER_EIG_MODE_VECTOR,
                              CUBLAS_FILL_MODE_LOWER, rb.r, CUDA_R_32F, d.pool[0], rb.r, CUDA_R_32F,
                              d.eig_w, CUDA_R_32F, &db, &hb, rb.count) == CUSOLVER_STATUS_SUCCESS) {
      dev_bytes = std::max(dev_bytes, db);
      host_bytes = std::max(host_bytes, hb);
    } else {
      d.eigh_batched = false;
    }
    ABLATE_RETURN_IF_ERROR(SolverStatus(
        cusolverDnXsyevd_bufferSize(d.solver, d.solver_params, CUSOLVER_EIG_MODE_VECTOR,
                                    CUBLAS_FILL_MODE_LOWER, rb.r, CUDA_R_32F, d.pool[0], rb.r,
                                    CUDA_R_32F, d.eig_w, CUDA_R_32F, &db, &hb),
        "spectral (cuda): cusolverDnXsyevd_bufferSize"));
    dev_bytes = std::max(dev_bytes, db);
    host_bytes = std::max(host_bytes, hb);
  }
  d.solver_work_bytes = dev_bytes;
  ABLATE_RETURN_IF_ERROR(
      d.Alloc(&d.solver_work, dev_bytes, "spectral (cuda): cuSOLVER work space"));
  d.solver_host_work.resize(host_bytes);
  return std::unique_ptr<BatchedPsi>(new BatchedPsi(std::move(impl)));
}

StatusOr<kernels::PsiMethod> BatchedPsi::Run(const std::vector<float*>& in,
                                             const std::vector<float*>& out, double p,
                                             const kernels::PsiOptions& opt, bool want_residual) {
  using kernels::PsiMethod;
  Impl& d = *impl_;
  if (in.size() != d.groups.size() || out.size() != d.groups.size())
    return InvalidArgument("BatchedPsi::Run: " + std::to_string(in.size()) + " inputs and " +
                           std::to_string(out.size()) + " outputs for " +
                           std::to_string(d.groups.size()) + " groups");
  for (size_t g = 0; g < in.size(); ++g) {
    if (!in[g] || !out[g] || in[g] == out[g])
      return InvalidArgument("BatchedPsi::Run: null or aliased buffers for group " +
                             std::to_string(g));
  }
  ABLATE_ASSIGN_OR_RETURN(PsiMethod method, ResolvePsiMethod(p, opt));
  d.residual_valid = false;
  d.eigh_ran = false;
  if (method == PsiMethod::kIdentity || p == 1.0) {
    for (size_t g = 0; g < in.size(); ++g) {
      const auto& gg = d.groups[g].g;
      ABLATE_RETURN_IF_ERROR(
          CudaStatus(cudaMemcpyAsync(out[g], in[g], sizeof(float) * int64_t(gg.m) * gg.n * gg.count,
                                     cudaMemcpyDeviceToDevice, d.stream),
                     "spectral (cuda): identity copy"));
    }
    return method;
  }
  if (method == PsiMethod::kNewtonSchulz) {
    for (size_t g = 0; g < in.size(); ++g)
      ABLATE_RETURN_IF_ERROR(d.NewtonSchulz(in[g], out[g], d.groups[g], opt.ns_steps));
    ABLATE_RETURN_IF_ERROR(CudaStatus(cudaGetLastError(), "spectral (cuda): Newton-Schulz launch"));
    return method;
  }
  const double e = 0.5 * (1.0 - p);
  if (want_residual && method == PsiMethod::kCoupledNewton) {
    ABLATE_RETURN_IF_ERROR(
        CudaStatus(cudaMemsetAsync(d.resmax, 0, sizeof(double) * d.total, d.stream),
                   "spectral (cuda): cudaMemsetAsync"));
    d.residual_valid = true;
  }
  for (size_t b = 0; b < d.rbatches.size(); ++b) {
    const RBatchPlan& rb = d.rbatches[b];
    const int r = rb.r;
    const int64_t rr = int64_t(r) * r;
    // Gram matrices of the short side, every group of this r into one batch (ShortGram).
    for (size_t g = 0; g < d.groups.size(); ++g) {
      const GroupPlan& gp = d.groups[g];
      if (gp.rbatch != int(b)) continue;
      const int m = gp.g.m, n = gp.g.n;
      const int64_t per = int64_t(m) * n;
      float* G = d.pool[0] + int64_t(gp.offset) * rr;
      if (n <= m) {  // O^T O
        ABLATE_RETURN_IF_ERROR(d.Matmul(false, true, n, n, m, 1.0f, in[g], n, per, in[g], n, per,
                                        0.0f, nullptr, G, n, rr, gp.g.count));
      } else {  // O O^T
        ABLATE_RETURN_IF_ERROR(d.Matmul(true, false, m, m, n, 1.0f, in[g], n, per, in[g], n, per,
                                        0.0f, nullptr, G, m, rr, gp.g.count));
      }
    }
    d.Symmetrize(d.pool[0], nullptr, r, rb.count);
    float* F = nullptr;
    if (method == PsiMethod::kCoupledNewton) {
      ABLATE_ASSIGN_OR_RETURN(F, d.NewtonChain(rb, e, opt.newton_iters, want_residual));
    } else {
      ABLATE_ASSIGN_OR_RETURN(F, d.Eigh(rb, e));
    }
    // ApplyGramFactor: out = O F (n <= m) or F O (n > m).
    for (size_t g = 0; g < d.groups.size(); ++g) {
      const GroupPlan& gp = d.groups[g];
      if (gp.rbatch != int(b)) continue;
      const int m = gp.g.m, n = gp.g.n;
      const int64_t per = int64_t(m) * n;
      const float* Fg = F + int64_t(gp.offset) * rr;
      if (n <= m) {
        ABLATE_RETURN_IF_ERROR(d.Matmul(false, false, n, m, n, 1.0f, Fg, n, rr, in[g], n, per, 0.0f,
                                        nullptr, out[g], n, per, gp.g.count));
      } else {
        ABLATE_RETURN_IF_ERROR(d.Matmul(false, false, n, m, m, 1.0f, in[g], n, per, Fg, m, rr, 0.0f,
                                        nullptr, out[g], n, per, gp.g.count));
      }
    }
  }
  ABLATE_RETURN_IF_ERROR(CudaStatus(cudaGetLastError(), "spectral (cuda): kernel launch"));
  return method;
}

StatusOr<double> BatchedPsi::ResidualMax() {
  Impl& d = *impl_;
  ABLATE_RETURN_IF_ERROR(
      CudaStatus(cudaStreamSynchronize(d.stream), "spectral (cuda): cudaStreamSynchronize"));
  if (!d.residual_valid) return 0.0;
  std::vector<double> res(size_t(d.total));
  ABLATE_RETURN_IF_ERROR(
      CudaStatus(cudaMemcpy(res.data(), d.resmax, sizeof(double) * d.total, cudaMemcpyDeviceToHost),
                 "spectral (cuda): residual copy"));
  double mx = 0;
  for (double r : res) mx = std::max(mx, r);
  return mx;
}

Status BatchedPsi::CheckEigh() {
  Impl& d = *impl_;
  ABLATE_RETURN_IF_ERROR(
      CudaStatus(cudaStreamSynchronize(d.stream), "spectral (cuda): cudaStreamSynchronize"));
  if (!d.eigh_ran) return Status::Ok();
  std::vector<int> info(size_t(d.total));
  ABLATE_RETURN_IF_ERROR(
      CudaStatus(cudaMemcpy(info.data(), d.eig_info, sizeof(int) * d.total, cudaMemcpyDeviceToHost),
                 "spectral (cuda): eigh info copy"));
  for (int i = 0; i < d.total; ++i) {
    if (info[size_t(i)] != 0)
      return Internal("SymPowEigh (cuda): cuSOLVER syevd failed on matrix " + std::to_string(i) +
                      ", info=" + std::to_string(info[size_t(i)]));
  }
  return Status::Ok();
}

}  // namespace ablate::kernels::cuda
