// FPA on the GPU: what the forward (fpa_forward.cu) and backward (fpa_backward.cu) files share
// (internal to kernels/attention/cuda): the launchers' argument checks. The host API and the
// numerics are attention_cuda.h's (kernels/ALGORITHMS.md §1.1).
#pragma once

#include <cstdint>
#include <string>

#include "ablate/status.h"
#include "attention/cuda/attention_common.cuh"
#include "attention/cuda/attention_cuda.h"
#include "attention/cuda/wgmma.cuh"

namespace ablate::kernels::fpa {

using namespace ::ablate::kernels::cuda;  // (the shared device helpers: attention_common.cuh)
using bf16 = __nv_bfloat16;

inline Status ValidateShape(const AttnShape& s, const char* who) {
  const std::string w(who);
  if (s.D != 64 && s.D != 128) {
    return InvalidArgument(w + ": head dim D must be 64 or 128, got " + std::to_string(s.D));
  }
  if (s.B < 1 || s.H < 1 || s.N < 1) {
    return InvalidArgument(w + ": B, H, N must be >= 1, got B=" + std::to_string(s.B) +
                           " H=" + std::to_string(s.H) + " N=" + std::to_string(s.N));
  }
  return CheckGridLimits(int64_t(s.B) * s.H, s.N, w);
}

inline Status CheckPtr(const void* ptr, const char* name, const char* who) {
  if (ptr == nullptr) return InvalidArgument(std::string(who) + ": " + name + " is null");
  if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0) {
    return InvalidArgument(std::string(who) + ": " + name + " must be 16-byte aligned");
  }
  return Status::Ok();
}

// What both launchers check first: the shape and the four tensors they share.
inline Status CheckShared(const AttnShape& s, const bf16* q, const bf16* k, const bf16* v,
                          const bf16* o, const char* who) {
  ABLATE_RETURN_IF_ERROR(ValidateShape(s, who));
  ABLATE_RETURN_IF_ERROR(CheckPtr(q, "q", who));
  ABLATE_RETURN_IF_ERROR(CheckPtr(k, "k", who));
  ABLATE_RETURN_IF_ERROR(CheckPtr(v, "v", who));
  return CheckPtr(o, "o", who);
}

}  // namespace ablate::kernels::fpa
