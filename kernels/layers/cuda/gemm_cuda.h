// Linear layers on the GPU through cuBLASLt: bf16 operands, fp32 accumulation, fp32 or bf16 output,
// row-major tensors in PyTorch's nn.Linear layout (weight (OC, IC), y = x W^T), the device twin of
// MatmulForward / MatmulBackward in layers_cpu.h.
//
// A LtGemm owns a cuBLASLt handle and a workspace, and caches one set of descriptors plus the
// heuristic's algorithm per distinct problem (shape, transposes, types, beta != 0), so steady-state
// calls do no descriptor set-up. Every call enqueues on `stream` and returns without host
// synchronization; cuBLASLt errors come back as Internal with the status name.
// Thread safety: not thread-safe (the cache); one LtGemm per stream / training process.
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "ablate/status.h"

namespace ablate::kernels::cuda {

enum class OutType { kF32, kBF16 };

class LtGemm {
 public:
  // workspace_bytes: cuBLASLt workspace (32 MiB is plenty on Hopper).
  static StatusOr<std::unique_ptr<LtGemm>> Create(size_t workspace_bytes = size_t(32) << 20);
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  // out (N, OC) = alpha * inp (N, IC) . w (OC, IC)^T + beta * c (N, OC). c has out's type and may
  // be out itself (in-place accumulate) or another buffer (a fused residual: out = x + y); it is
  // ignored when beta == 0 (may be null then).
  Status Forward(void* out, OutType out_type, const __nv_bfloat16* inp, const __nv_bfloat16* w,
                 int64_t N, int IC, int OC, float alpha, float beta, const void* c,
                 cudaStream_t stream);
  // dinp (N, IC) = alpha * dout (N, OC) . w (OC, IC) + beta * dinp.
  Status BackwardData(void* dinp, OutType dinp_type, const __nv_bfloat16* dout,
                      const __nv_bfloat16* w, int64_t N, int IC, int OC, float alpha, float beta,
                      cudaStream_t stream);
  // dw (OC, IC) fp32 = alpha * dout (N, OC)^T . inp (N, IC) + beta * dw (beta = 1: accumulate into
  // the fp32 gradient buffer).
  Status BackwardWeight(float* dw, const __nv_bfloat16* dout, const __nv_bfloat16* inp, int64_t N,
                        int IC, int OC, float alpha, float beta, cudaStream_t stream);

  // GELU in the GEMM epilogue (cuBLASLt's GELU, the tanh approximation, = GeluForwardCuda):
  // pre (N, OC) bf16 = inp . w^T and out (N, OC) bf16 = gelu(pre), one pass. OC % 8 == 0.
  // Unimplemented when cuBLASLt offers no algorithm for it (callers fall back to Forward +
  // GeluForwardCuda).
  Status ForwardGelu(__nv_bfloat16* out, __nv_bfloat16* pre, const __nv_bfloat16* inp,
                     const __nv_bfloat16* w, int64_t N, int IC, int OC, cudaStream_t stream);
  // dinp (N, IC) bf16 = (dout (N, OC) . w (OC, IC)) * gelu'(pre), pre (N, IC) bf16 the forward's
  // pre-activation: BackwardData with GeluBackwardCuda in its epilogue. IC % 8 == 0.
  // Unimplemented as above.
  Status BackwardDataDGelu(__nv_bfloat16* dinp, const __nv_bfloat16* dout, const __nv_bfloat16* w,
                           const __nv_bfloat16* pre, int64_t N, int IC, int OC,
                           cudaStream_t stream);

 private:
  struct Plan;
  LtGemm() = default;
  // Column-major D (m, n) = alpha op(A) op(B) + beta C, A/B bf16, C/D of `type`.
  // epilogue: a cublasLtEpilogue_t (CUBLASLT_EPILOGUE_DEFAULT, GELU_AUX or DGELU); aux: the GELU
  // input matrix (m, n) bf16 with leading dimension ldd.
  Status Run(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void* a, int64_t lda,
             const void* b, int64_t ldb, const void* c, void* d, int64_t ldd, OutType type,
             float alpha, float beta, cudaStream_t stream, int epilogue = CUBLASLT_EPILOGUE_DEFAULT,
             const void* aux = nullptr);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  // transposes, m, n, k, lda, ldb, ldd, output type, beta != 0, packed pointer alignments,
  // epilogue.
  using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int,
                         bool, int, int>;
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

}  // namespace ablate::kernels::cuda
