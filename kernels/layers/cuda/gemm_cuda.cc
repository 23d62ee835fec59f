// cuBLASLt linear layers: see gemm_cuda.h.
#include "layers/cuda/gemm_cuda.h"

#include "ablate/cuda_status.h"

#include <string>

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

int Log2(int v) {
  int r = 0;
  while ((1 << r) < v) ++r;
  return r;
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

Status LtGemm::Run(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void* a, int64_t lda,
                   const void* b, int64_t ldb, const void* c, void* d, int64_t ldd, OutType type,
                   float alpha, float beta, cudaStream_t stream, int epilogue, const void* aux) {
  if (m <= 0 || n <= 0 || k <= 0) {
    return InvalidArgument("LtGemm: sizes must be positive (m " + std::to_string(m) + ", n " +
                           std::to_string(n) + ", k " + std::to_string(k) + ")");
  }
  const bool use_c = beta != 0.0f;
  if (!use_c) c = d;
  const int al_a = Alignment(a), al_b = Alignment(b), al_c = Alignment(c), al_d = Alignment(d);
  const bool has_aux = epilogue != CUBLASLT_EPILOGUE_DEFAULT;
  const int al_x = has_aux ? Alignment(aux) : 256;
  const int packed =
      Log2(al_a) | (Log2(al_b) << 4) | (Log2(al_c) << 8) | (Log2(al_d) << 12) | (Log2(al_x) << 16);
  const Key key{ta, tb, m, n, k, lda, ldb, ldd, int(type), use_c, packed, epilogue};
  auto it = plans_.find(key);
  if (it == plans_.end()) {
    auto plan = std::make_unique<Plan>();
    const cudaDataType_t ct = type == OutType::kF32 ? CUDA_R_32F : CUDA_R_16BF;
    ABLATE_RETURN_IF_ERROR(
        LtCheck(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc"));
    const cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    ABLATE_RETURN_IF_ERROR(LtCheck(cublasLtMatmulDescSetAttribute(
        plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa), "transa"));
    ABLATE_RETURN_IF_ERROR(LtCheck(cublasLtMatmulDescSetAttribute(
        plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb), "transb"));
    if (has_aux) {
      const cublasLtEpilogue_t ep = cublasLtEpilogue_t(epilogue);
      const int64_t aux_ld = ldd;
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
        cublasLtMatrixLayoutCreate(&plan->a, CUDA_R_16BF, ta ? k : m, ta ? m : k, lda), "layout a"));
    ABLATE_RETURN_IF_ERROR(LtCheck(
        cublasLtMatrixLayoutCreate(&plan->b, CUDA_R_16BF, tb ? n : k, tb ? k : n, ldb), "layout b"));
    ABLATE_RETURN_IF_ERROR(
        LtCheck(cublasLtMatrixLayoutCreate(&plan->cd, ct, m, n, ldd), "layout c/d"));
    cublasLtMatmulPreference_t pref = nullptr;
    ABLATE_RETURN_IF_ERROR(LtCheck(cublasLtMatmulPreferenceCreate(&pref), "preference"));
    uint64_t ws = workspace_bytes_;
    uint32_t aa = al_a, ab = al_b, ac = al_c, ad = al_d;
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
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(handle_, plan->desc, plan->a, plan->b,
                                                       plan->cd, plan->cd, pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (has_aux && (hs != CUBLAS_STATUS_SUCCESS || found == 0)) {
      return Unimplemented("cuBLASLt: no algorithm with epilogue " + std::to_string(epilogue) +
                           " for m " + std::to_string(m) + ", n " + std::to_string(n) + ", k " +
                           std::to_string(k));
    }
    ABLATE_RETURN_IF_ERROR(LtCheck(hs, "heuristic"));
    if (found == 0) {
      return Internal("cuBLASLt: no algorithm for m " + std::to_string(m) + ", n " +
                      std::to_string(n) + ", k " + std::to_string(k));
    }
    plan->algo = result.algo;
    it = plans_.emplace(key, std::move(plan)).first;
  }
  Plan& p = *it->second;
  if (has_aux) {
    ABLATE_RETURN_IF_ERROR(
        LtCheck(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                               &aux, sizeof aux),
                "aux"));
  }
  return LtCheck(cublasLtMatmul(handle_, p.desc, &alpha, a, p.a, b, p.b, &beta, c, p.cd, d, p.cd,
                                &p.algo, workspace_, workspace_bytes_, stream),
                 "matmul");
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
             stream, CUBLASLT_EPILOGUE_GELU_AUX, pre);
}

Status LtGemm::BackwardDataDGelu(__nv_bfloat16* dinp, const __nv_bfloat16* dout,
                                 const __nv_bfloat16* w, const __nv_bfloat16* pre, int64_t N,
                                 int IC, int OC, cudaStream_t stream) {
  if (IC % 8 != 0) return Unimplemented("LtGemm::BackwardDataDGelu: IC % 8 != 0");
  return Run(false, false, IC, N, OC, w, IC, dout, OC, nullptr, dinp, IC, OutType::kBF16, 1.f, 0.f,
             stream, CUBLASLT_EPILOGUE_DGELU, pre);
}

}  // namespace ablate::kernels::cuda
