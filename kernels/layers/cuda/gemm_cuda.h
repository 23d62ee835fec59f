// Linear layers on the GPU through cuBLASLt: bf16 operands, fp32 accumulation, fp32 or bf16 output,
// row-major tensors in PyTorch's nn.Linear layout (weight (OC, IC), y = x W^T), the device twin of
// MatmulForward / MatmulBackward in layers_cpu.h.
//
// A LtGemm owns a cuBLASLt handle and a workspace, and caches one set of descriptors plus an
// algorithm per distinct problem (GemmProblem: shape, transposes, types, beta != 0, alignments,
// epilogue), so steady-state calls do no descriptor set-up. The algorithm is the heuristic's first,
// or the one a GEMM tuning table recorded for the problem (ablate/gemm_tuning.h: SetTuning to
// replay one, Tune to measure one). Every call enqueues on `stream` and returns without host
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
#include <string>

#include "ablate/gemm_tuning.h"
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

  // Replays `tuning` (may be null: the heuristic's algorithms) for every problem from now on; the
  // problems seen so far are set up again on their next call. A table of another device or
  // cuBLASLt version is not used: the returned status says why (FailedPrecondition), and the
  // heuristic's algorithms stay. An entry whose algorithm cuBLASLt refuses for its problem
  // (cublasLtMatmulAlgoCheck, or more workspace than this LtGemm has) is skipped the same way,
  // counted in use().rejected.
  Status SetTuning(std::shared_ptr<const GemmTuning> tuning);
  struct Use {
    int problems = 0;  // distinct problems set up since SetTuning
    int tuned = 0;     // of those, run with the table's algorithm
    int rejected = 0;  // of those, with an entry cuBLASLt refused for the problem
  };
  Use use() const { return use_; }

  // Times up to `candidates` of the heuristic's algorithms for every problem this LtGemm has run
  // (median of 5 rounds of `reps` back-to-back calls after 3 warm-up calls, CUDA events on
  // `stream`), on scratch operands of the problem's shapes and alignments (one problem's at a time;
  // a problem whose scratch does not fit in free device memory keeps the heuristic's choice and is
  // left out), and returns the table: for each problem the fastest, unless it is within
  // `min_gain` of the heuristic's first (then that one, so noise does not pick). The chosen
  // algorithms also take effect here. Synchronizes; leaves the model's buffers untouched.
  StatusOr<GemmTuning> Tune(int candidates, int reps, double min_gain, cudaStream_t stream);

  // The device name and cuBLASLt version a table must carry to apply here.
  static StatusOr<std::pair<std::string, int64_t>> DeviceAndVersion();

 private:
  struct Plan;
  LtGemm() = default;
  // Column-major D (m, n) = alpha op(A) op(B) + beta C, A/B bf16, C/D of `type`.
  // aux: the GELU epilogue's input (DGELU) or pre-activation output (GELU_AUX), (m, n) bf16 with
  // leading dimension ldd.
  Status Run(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void* a, int64_t lda,
             const void* b, int64_t ldb, const void* c, void* d, int64_t ldd, OutType type,
             float alpha, float beta, cudaStream_t stream,
             GemmEpilogue epilogue = GemmEpilogue::kNone, const void* aux = nullptr);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  // The descriptors of `p` and its algorithm: the tuning table's, if it has a valid one, else the
  // heuristic's first. Counts it in use_.
  StatusOr<std::unique_ptr<Plan>> MakePlan(const GemmProblem& p, const void* aux);
  std::map<GemmProblem, std::unique_ptr<Plan>> plans_;
  std::shared_ptr<const GemmTuning> tuning_;
  Use use_;
};

}  // namespace ablate::kernels::cuda
