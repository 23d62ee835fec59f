// The kind dispatch of attention_cuda.h: AttnForwardCuda / AttnBackwardCuda / AttnWorkspaceBytes
// run FPA (fpa_forward.cu, fpa_backward.cu) or SageBwd (sage_quant.cu, sage_forward.cu,
// sage_backward.cu) as opt.kind says.
#include "attention/cuda/attention_cuda.h"

#include <algorithm>

namespace ablate::kernels {

size_t AttnWorkspaceBytes(const AttnShape& shape, const AttnOptions& opt) {
  return opt.kind == AttnKind::kFpa ? FpaWorkspaceBytes(shape) : SageWorkspaceBytes(shape);
}

size_t AttnDetScratchBytes(const AttnShape& shape, const AttnOptions& opt) {
  if (!opt.deterministic) return 0;
  return opt.kind == AttnKind::kFpa ? FpaDetScratchBytes(shape) : SageDetScratchBytes(shape, opt);
}

Status AttnForwardCuda(const AttnShape& shape, const AttnOptions& opt, const __nv_bfloat16* q,
                       const __nv_bfloat16* k, const __nv_bfloat16* v, __nv_bfloat16* o,
                       float* lse, void* workspace, size_t workspace_bytes, cudaStream_t stream,
                       const double* k_parts) {
  if (opt.kind == AttnKind::kFpa) return FpaForwardCuda(shape, q, k, v, o, lse, stream);
  return SageForwardCuda(shape, opt, q, k, v, o, lse, workspace, workspace_bytes, stream,
                         k_parts);
}

Status AttnBackwardCuda(const AttnShape& shape, const AttnOptions& opt, const __nv_bfloat16* q,
                        const __nv_bfloat16* k, const __nv_bfloat16* v, const __nv_bfloat16* o,
                        const float* lse, const __nv_bfloat16* do_, __nv_bfloat16* dq,
                        __nv_bfloat16* dk, __nv_bfloat16* dv, void* workspace,
                        size_t workspace_bytes, cudaStream_t stream, void* det_scratch,
                        size_t det_scratch_bytes) {
  if (opt.kind == AttnKind::kFpa) {
    if (opt.deterministic && det_scratch == nullptr) {
      return InvalidArgument(
          "AttnBackwardCuda: deterministic FPA needs its scratch "
          "(AttnDetScratchBytes)");
    }
    return FpaBackwardCuda(shape, q, k, v, o, lse, do_, dq, dk, dv, workspace, workspace_bytes,
                           stream, opt.deterministic ? det_scratch : nullptr, det_scratch_bytes);
  }
  return SageBackwardCuda(shape, opt, q, k, v, o, lse, do_, dq, dk, dv, workspace, workspace_bytes,
                          stream, det_scratch, det_scratch_bytes);
}

}  // namespace ablate::kernels
