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

// SageBwd's dQ and dK with the dS products in bf16 (AttnOptions::ds_bf16; sage_backward.cu runs it
// after its INT8 backward, whose dV it keeps): DsBf16BackwardKernel (ds_bf16_backward.cuh) on
// SageBwd's codes and scales, dQ = tau bf16(dS) bf16(K - kbar), dK = tau bf16(dS)^T bf16(Q)
// (kernels/ALGORITHMS.md §1.2; without Q-smoothing, whose mu it does not subtract, and without the
// dQ K-mean correction). The pointers are the SageBwd workspace's regions (attention_cuda.h) after
// the forward and the backward's dO quantization; dq_acc: an fp32 accumulator of B*H*N*D floats, or
// with `deterministic` a scratch of ceil(N / 128) such slices; drow (B*H*N) is rewritten.
struct SageDsBf16Args {
  const int8_t *qh, *kh, *vh, *doh;  // vh, doh: with int8_dp
  const float *sq, *sk, *sv, *sdo;
  const float* kbar;  // null without K-smoothing
  float* drow;
  float* dq_acc;
  int np, kv_shift;
  bool int8_dp, deterministic;
};
Status SageDsBf16BackwardCuda(const AttnShape& s, const SageDsBf16Args& a, const bf16* q,
                              const bf16* k, const bf16* v, const bf16* o, const float* lse,
                              const bf16* do_, bf16* dq, bf16* dk, cudaStream_t stream);

}  // namespace ablate::kernels::fpa
