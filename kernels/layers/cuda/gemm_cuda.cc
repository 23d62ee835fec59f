// cuBLASLt linear layers: see gemm_cuda.h.
#include "layers/cuda/gemm_cuda.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "ablate/cuda_status.h"

namespace ablate::kernels::cuda {
namespace {

Status LtCheck(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  return Internal(std::string("cuBLASLt ") + what + ": cublasStatus_t " + std::to_string(int(s)));
}

// The largest power of two (<= 256) dividing the address: cuBLASLt's heuristic assumes 256-byte
// aligned operands unless told otherwise, and parameter tensors sit at arbitrary offsets.
int Alignment(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  int al = 256;
  while (al > 1 && (a % al) != 0) al >>= 1;
  return al;
}

}  // namespace

struct LtGemm::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, cd = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~Plan() {
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (cd) cublasLtMatrixLayoutDestroy(cd);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

namespace {

cublasLtEpilogue_t LtEpilogue(GemmEpilogue e) {
  switch (e) {
    case GemmEpilogue::kGeluAux:
      return CUBLASLT_EPILOGUE_GELU_AUX;
    case GemmEpilogue::kDGelu:
      return CUBLASLT_EPILOGUE_DGELU;
    case GemmEpilogue::kNone:
      break;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

std::string Shape(const GemmProblem& p) {
  return "m " + std::to_string(p.m) + ", n " + std::to_string(p.n) + ", k " + std::to_string(p.k);
}

// The heuristic's first `want` algorithms for the plan's problem, best first.
StatusOr<std::vector<cublasLtMatmulAlgo_t>> Heuristic(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
    cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t cd, const GemmProblem& p, size_t workspace,
    int want) {
  cublasLtMatmulPreference_t pref = nullptr;
  ABLATE_RETURN_IF_ERROR(LtCheck(cublasLtMatmulPreferenceCreate(&pref), "preference"));
  uint64_t ws = workspace;
  uint32_t aa = p.align_a, ab = p.align_b, ac = p.align_c, ad = p.align_d;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                       sizeof ws);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa,
                                       sizeof aa);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ab,
                                       sizeof ab);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ac,
                                       sizeof ac);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ad,
                                       sizeof ad);
  std::vector<cublasLtMatmulHeuristicResult_t> results(size_t(std::max(1, want)));
  int found = 0;
  const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(
      handle, desc, a, b, cd, cd, pref, int(results.size()), results.data(), &found);
  cublasLtMatmulPreferenceDestroy(pref);
  const bool has_aux = p.epilogue != GemmEpilogue::kNone;
  if (has_aux && (hs != CUBLAS_STATUS_SUCCESS || found == 0)) {
    return Unimplemented("cuBLASLt: no algorithm with epilogue " +
                         std::to_string(int(LtEpilogue(p.epilogue))) + " for " + Shape(p));
  }
  ABLATE_RETURN_IF_ERROR(LtCheck(hs, "heuristic"));
  if (found == 0) return Internal("cuBLASLt: no algorithm for " + Shape(p));
  std::vector<cublasLtMatmulAlgo_t> algos;
  for (int i = 0; i < found; ++i) algos.push_back(results[size_t(i)].algo);
  return algos;
}

}  // namespace

StatusOr<std::unique_ptr<LtGemm>> LtGemm::Create(size_t workspace_bytes) {
  std::unique_ptr<LtGemm> g(new LtGemm());
  ABLATE_RETURN_IF_ERROR(LtCheck(cublasLtCreate(&g->handle_), "create"));
  if (workspace_bytes > 0) {
    ABLATE_RETURN_IF_ERROR(DeviceAlloc(&g->workspace_, workspace_bytes, "LtGemm workspace"));
  }
  g->workspace_bytes_ = workspace_bytes;
  return g;
}

LtGemm::~LtGemm() {
  plans_.clear();
  if (workspace_) cudaFree(workspace_);
  if (handle_) cublasLtDestroy(handle_);
}

StatusOr<std::unique_ptr<LtGemm::Plan>> LtGemm::MakePlan(const GemmProblem& p, const void* aux) {
  auto plan = std::make_unique<Plan>();
  const cudaDataType_t ct = p.f32_out ? CUDA_R_32F : CUDA_R_16BF;
  ABLATE_RETURN_IF_ERROR(
      LtCheck(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc"));
  const cublasOperation_t opa = p.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t opb = p.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  ABLATE_RETURN_IF_ERROR(LtCheck(
      cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa),
      "transa"));
  ABLATE_RETURN_IF_ERROR(LtCheck(
      cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb),
      "transb"));
  if (p.epilogue != GemmEpilogue::kNone) {
    const cublasLtEpilogue_t ep = LtEpilogue(p.epilogue);
    const int64_t aux_ld = p.ldd;
    const int32_t aux_type = CUDA_R_16BF;
    ABLATE_RETURN_IF_ERROR(LtCheck(
        cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep),
        "epilogue"));
    ABLATE_RETURN_IF_ERROR(
        LtCheck(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                               &aux_ld, sizeof aux_ld),
                "aux ld"));
    ABLATE_RETURN_IF_ERROR(LtCheck(
        cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE,
                                       &aux_type, sizeof aux_type),
        "aux type"));
    // The heuristic reads the pointer's alignment.
    ABLATE_RETURN_IF_ERROR(
        LtCheck(cublasLtMatmulDescSetAttribute(
                    plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux),
                "aux"));
  }
  // Stored (column-major) shapes of the operands.
  ABLATE_RETURN_IF_ERROR(LtCheck(
      cublasLtMatrixLayoutCreate(&plan->a, CUDA_R_16BF, p.ta ? p.k : p.m, p.ta ? p.m : p.k, p.lda),
      "layout a"));
  ABLATE_RETURN_IF_ERROR(LtCheck(
      cublasLtMatrixLayoutCreate(&plan->b, CUDA_R_16BF, p.tb ? p.n : p.k, p.tb ? p.k : p.n, p.ldb),
      "layout b"));
  ABLATE_RETURN_IF_ERROR(
      LtCheck(cublasLtMatrixLayoutCreate(&plan->cd, ct, p.m, p.n, p.ldd), "layout c/d"));
  ABLATE_ASSIGN_OR_RETURN(auto algos, Heuristic(handle_, plan->desc, plan->a, plan->b, plan->cd, p,
                                                workspace_bytes_, 1));
  plan->algo = algos[0];
  ++use_.problems;
  if (tuning_) {
    auto it = tuning_->entries.find(p.Key());
    if (it != tuning_->entries.end()) {
      cublasLtMatmulAlgo_t algo;
      static_assert(sizeof algo.data == sizeof it->second.algo);
      std::memcpy(algo.data, it->second.algo.data(), sizeof algo.data);
      cublasLtMatmulHeuristicResult_t check{};
      if (cublasLtMatmulAlgoCheck(handle_, plan->desc, plan->a, plan->b, plan->cd, plan->cd, &algo,
                                  &check) == CUBLAS_STATUS_SUCCESS &&
          check.workspaceSize <= workspace_bytes_) {
        plan->algo = algo;
        ++use_.tuned;
      } else {
        ++use_.rejected;
      }
    }
  }
  return plan;
}

Status LtGemm::Run(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void* a, int64_t lda,
                   const void* b, int64_t ldb, const void* c, void* d, int64_t ldd, OutType type,
                   float alpha, float beta, cudaStream_t stream, GemmEpilogue epilogue,
                   const void* aux) {
  if (m <= 0 || n <= 0 || k <= 0) {
    return InvalidArgument("LtGemm: sizes must be positive (m " + std::to_string(m) + ", n " +
                           std::to_string(n) + ", k " + std::to_string(k) + ")");
  }
  const bool use_c = beta != 0.0f;
  if (!use_c) c = d;
  const bool has_aux = epilogue != GemmEpilogue::kNone;
  const GemmProblem p{.ta = ta,
                      .tb = tb,
                      .m = m,
                      .n = n,
                      .k = k,
                      .lda = lda,
                      .ldb = ldb,
                      .ldd = ldd,
                      .f32_out = type == OutType::kF32,
                      .accumulate = use_c,
                      .align_a = Alignment(a),
                      .align_b = Alignment(b),
                      .align_c = Alignment(c),
                      .align_d = Alignment(d),
                      .align_aux = has_aux ? Alignment(aux) : 256,
                      .epilogue = epilogue};
  auto it = plans_.find(p);
  if (it == plans_.end()) {
    ABLATE_ASSIGN_OR_RETURN(auto plan, MakePlan(p, aux));
    it = plans_.emplace(p, std::move(plan)).first;
  }
  Plan& plan = *it->second;
  if (has_aux) {
    ABLATE_RETURN_IF_ERROR(
        LtCheck(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                               &aux, sizeof aux),
                "aux"));
  }
  return LtCheck(cublasLtMatmul(handle_, plan.desc, &alpha, a, plan.a, b, plan.b, &beta, c, plan.cd,
                                d, plan.cd, &plan.algo, workspace_, workspace_bytes_, stream),
                 "matmul");
}

StatusOr<std::pair<std::string, int64_t>> LtGemm::DeviceAndVersion() {
  int dev = 0;
  cudaDeviceProp prop{};
  ABLATE_RETURN_IF_ERROR(CudaStatus(cudaGetDevice(&dev), "cudaGetDevice"));
  ABLATE_RETURN_IF_ERROR(
      CudaStatus(cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties"));
  return std::make_pair(std::string(prop.name), int64_t(cublasLtGetVersion()));
}

Status LtGemm::SetTuning(std::shared_ptr<const GemmTuning> tuning) {
  plans_.clear();
  use_ = Use{};
  tuning_ = nullptr;
  if (!tuning) return Status::Ok();
  ABLATE_ASSIGN_OR_RETURN(auto here, DeviceAndVersion());
  if (tuning->device != here.first || tuning->cublaslt_version != here.second) {
    return FailedPrecondition(
        "the GEMM tuning table was measured on " + tuning->device + " with cuBLASLt " +
        std::to_string(tuning->cublaslt_version) + "; this is " + here.first + " with cuBLASLt " +
        std::to_string(here.second) + " (its algorithms are not used; tune again here)");
  }
  tuning_ = std::move(tuning);
  return Status::Ok();
}

namespace {

// Scratch device memory of one tuning problem: freed on every path.
struct Scratch {
  std::vector<void*> blocks;
  ~Scratch() {
    for (void* p : blocks) cudaFree(p);
  }
  // `bytes` plus an offset that leaves the pointer aligned to exactly `align` bytes (as the
  // problem's operand is), filled with a fixed pattern of bf16 values in [-1, 1) when the GEMM
  // reads it (else zeros); null when the memory is not there.
  void* Get(size_t bytes, int align, bool read) {
    void* p = nullptr;
    if (cudaMalloc(&p, bytes + 256) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    blocks.push_back(p);
    static const std::vector<uint16_t> pattern = [] {
      std::vector<uint16_t> h(size_t(1) << 20);
      uint32_t x = 12345;
      for (auto& v : h) {
        x = x * 1664525u + 1013904223u;
        const float f = float(int(x >> 9) - (1 << 22)) / float(1 << 22);
        uint32_t u;
        std::memcpy(&u, &f, sizeof u);
        v = uint16_t(u >> 16);
      }
      return h;
    }();
    char* base = static_cast<char*>(p) + (align < 256 ? align : 0);
    if (!read) {
      if (cudaMemset(base, 0, bytes) == cudaSuccess) return base;
      cudaGetLastError();
      return nullptr;
    }
    const size_t chunk = pattern.size() * sizeof(uint16_t);
    for (size_t off = 0; off < bytes; off += chunk) {
      if (cudaMemcpy(base + off, pattern.data(), std::min(chunk, bytes - off),
                     cudaMemcpyHostToDevice) != cudaSuccess) {
        cudaGetLastError();
        return nullptr;
      }
    }
    return base;
  }
};

}  // namespace

StatusOr<GemmTuning> LtGemm::Tune(int candidates, int reps, double min_gain, cudaStream_t stream) {
  if (candidates < 1 || reps < 1 || !(min_gain >= 0)) {
    return InvalidArgument("LtGemm::Tune: candidates and reps must be >= 1, min_gain >= 0");
  }
  GemmTuning table;
  ABLATE_ASSIGN_OR_RETURN(auto here, DeviceAndVersion());
  table.device = here.first;
  table.cublaslt_version = here.second;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  ABLATE_RETURN_IF_ERROR(CudaStatus(cudaEventCreate(&e0), "cudaEventCreate"));
  ABLATE_RETURN_IF_ERROR(CudaStatus(cudaEventCreate(&e1), "cudaEventCreate"));
  struct Events {
    cudaEvent_t a, b;
    ~Events() {
      cudaEventDestroy(a);
      cudaEventDestroy(b);
    }
  } events{e0, e1};
  for (auto& entry : plans_) {
    // Named references, not a structured binding: the lambda below captures them.
    const GemmProblem& p = entry.first;
    const std::unique_ptr<Plan>& plan = entry.second;
    ABLATE_ASSIGN_OR_RETURN(auto algos, Heuristic(handle_, plan->desc, plan->a, plan->b, plan->cd,
                                                  p, workspace_bytes_, candidates));
    const size_t a_bytes = size_t(p.lda) * size_t(p.ta ? p.m : p.k) * 2;
    const size_t b_bytes = size_t(p.ldb) * size_t(p.tb ? p.k : p.n) * 2;
    const size_t d_bytes = size_t(p.ldd) * size_t(p.n) * (p.f32_out ? 4 : 2);
    const bool has_aux = p.epilogue != GemmEpilogue::kNone;
    Scratch scratch;
    void* a = scratch.Get(a_bytes, p.align_a, true);
    void* b = a ? scratch.Get(b_bytes, p.align_b, true) : nullptr;
    void* d = b ? scratch.Get(d_bytes, p.align_d, p.accumulate) : nullptr;  // C is D here
    // The epilogue's aux: dGELU reads the pre-activation, GELU_AUX writes it.
    void* aux = d && has_aux ? scratch.Get(size_t(p.ldd) * size_t(p.n) * 2, p.align_aux,
                                           p.epilogue == GemmEpilogue::kDGelu)
                             : d;
    if (!a || !b || !d || !aux) continue;  // does not fit now: the heuristic's choice stays
    if (has_aux) {
      ABLATE_RETURN_IF_ERROR(
          LtCheck(cublasLtMatmulDescSetAttribute(
                      plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux),
                  "aux"));
    }
    const float alpha = 1.f, beta = p.accumulate ? 1.f : 0.f;
    auto run = [&](const cublasLtMatmulAlgo_t& algo) {
      return cublasLtMatmul(handle_, plan->desc, &alpha, a, plan->a, b, plan->b, &beta, d, plan->cd,
                            d, plan->cd, &algo, workspace_, workspace_bytes_, stream);
    };
    GemmChoice choice;
    choice.candidates = int(algos.size());
    double best_ms = -1;
    int best = -1;
    for (size_t i = 0; i < algos.size(); ++i) {
      bool ok = true;
      for (int w = 0; w < 3 && ok; ++w) ok = run(algos[i]) == CUBLAS_STATUS_SUCCESS;
      if (!ok) continue;  // a candidate cuBLASLt refuses to run is left out
      std::vector<double> rounds;
      for (int r = 0; r < 5; ++r) {
        ABLATE_RETURN_IF_ERROR(CudaStatus(cudaEventRecord(e0, stream), "cudaEventRecord"));
        for (int i_rep = 0; i_rep < reps; ++i_rep) {
          ABLATE_RETURN_IF_ERROR(LtCheck(run(algos[i]), "matmul (tuning)"));
        }
        ABLATE_RETURN_IF_ERROR(CudaStatus(cudaEventRecord(e1, stream), "cudaEventRecord"));
        ABLATE_RETURN_IF_ERROR(CudaStatus(cudaEventSynchronize(e1), "cudaEventSynchronize"));
        float ms = 0;
        ABLATE_RETURN_IF_ERROR(CudaStatus(cudaEventElapsedTime(&ms, e0, e1), "elapsed"));
        rounds.push_back(double(ms) / reps);
      }
      std::sort(rounds.begin(), rounds.end());
      const double ms = rounds[rounds.size() / 2];
      if (i == 0) choice.heuristic_ms = ms;
      if (best < 0 || ms < best_ms) {
        best = int(i);
        best_ms = ms;
      }
    }
    ABLATE_RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream), "cudaStreamSynchronize"));
    if (best < 0 || choice.heuristic_ms <= 0) continue;  // the heuristic's own choice did not run
    if (best_ms > choice.heuristic_ms * (1.0 - min_gain)) {
      best = 0;
      best_ms = choice.heuristic_ms;
    }
    choice.candidate = best;
    choice.ms = best_ms;
    std::memcpy(choice.algo.data(), algos[size_t(best)].data, sizeof choice.algo);
    plan->algo = algos[size_t(best)];
    table.entries[p.Key()] = choice;
  }
  return table;
}

// Row-major X (N, IC) is column-major X^T (IC, N) with ld IC; the same for every operand. So
// Y^T (OC, N) = W (OC, IC) X^T: A = w stored (IC, OC) transposed, B = x stored (IC, N).
Status LtGemm::Forward(void* out, OutType out_type, const __nv_bfloat16* inp,
                       const __nv_bfloat16* w, int64_t N, int IC, int OC, float alpha, float beta,
                       const void* c, cudaStream_t stream) {
  return Run(/*ta=*/true, /*tb=*/false, OC, N, IC, w, IC, inp, IC, c, out, OC, out_type, alpha,
             beta, stream);
}

// dX^T (IC, N) = W^T (IC, OC) dY^T (OC, N): A = w stored (IC, OC), B = dy stored (OC, N).
Status LtGemm::BackwardData(void* dinp, OutType dinp_type, const __nv_bfloat16* dout,
                            const __nv_bfloat16* w, int64_t N, int IC, int OC, float alpha,
                            float beta, cudaStream_t stream) {
  return Run(false, false, IC, N, OC, w, IC, dout, OC, dinp, dinp, IC, dinp_type, alpha, beta,
             stream);
}

// dW^T (IC, OC) = X^T (IC, N) dY (N, OC): A = x stored (IC, N), B = dy stored (OC, N) transposed.
Status LtGemm::BackwardWeight(float* dw, const __nv_bfloat16* dout, const __nv_bfloat16* inp,
                              int64_t N, int IC, int OC, float alpha, float beta,
                              cudaStream_t stream) {
  return Run(false, true, IC, OC, N, inp, IC, dout, OC, dw, dw, IC, OutType::kF32, alpha, beta,
             stream);
}

Status LtGemm::ForwardGelu(__nv_bfloat16* out, __nv_bfloat16* pre, const __nv_bfloat16* inp,
                           const __nv_bfloat16* w, int64_t N, int IC, int OC, cudaStream_t stream) {
  if (OC % 8 != 0) return Unimplemented("LtGemm::ForwardGelu: OC % 8 != 0");
  return Run(true, false, OC, N, IC, w, IC, inp, IC, nullptr, out, OC, OutType::kBF16, 1.f, 0.f,
             stream, GemmEpilogue::kGeluAux, pre);
}

Status LtGemm::BackwardDataDGelu(__nv_bfloat16* dinp, const __nv_bfloat16* dout,
                                 const __nv_bfloat16* w, const __nv_bfloat16* pre, int64_t N,
                                 int IC, int OC, cudaStream_t stream) {
  if (IC % 8 != 0) return Unimplemented("LtGemm::BackwardDataDGelu: IC % 8 != 0");
  return Run(false, false, IC, N, OC, w, IC, dout, OC, nullptr, dinp, IC, OutType::kBF16, 1.f, 0.f,
             stream, GemmEpilogue::kDGelu, pre);
}

}  // namespace ablate::kernels::cuda
