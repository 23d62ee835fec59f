// The trainer's optimizers (kernels/ALGORITHMS.md §2) over one contiguous float32 parameter buffer.
//
// Groups (decided once from the parameter roles):
//   spectral group  kind spectral: the 2-D hidden matrices (Q, K, V, attention out, MLP up/down, each
//                   its own matrix: fused tensors are never split by shape), plus the embedding and
//                   an untied head when spectral_embeddings is set. Update: W <- W (1 - lr wd), then
//                   W <- W - lr * Psi_p(U) with U the RMS-normalized Adam direction (family rms) or the
//                   momentum buffer (family momentum); at p = 0 the update is scaled by
//                   sqrt(max(1, rows / cols)).
//   AdamW group     everything else (vectors, and embeddings/head unless spectral), and every tensor
//                   for kind adamw. Learning rate lr_vector for the group under kind spectral; for
//                   kind adamw, lr for matrices and lr_vector for vectors. Weight decay on matrices
//                   only.
// Global gradient-norm clipping is the caller's job (it needs the norm for its metrics); the
// optimizer sees clipped gradients.
//
// 8-bit state (state_bits 8): every state tensor of a matrix (m, v, momentum) is kept blockwise
// quantized (kernels/quant) and dequantized/updated/requantized each step; vector states stay fp32
// (tiny, and gains are sensitive). state_quant picks the code of the signed states (m, momentum);
// the second moment v uses the unsigned dynamic code, or with state_quant_v: linear the unsigned
// linear one, which zeroes its small entries so that m / (sqrt(v) + eps) is inflated (the unstable
// 8-bit AdamW baseline of the 8-bit Muon paper). state_bytes() reports the real footprint.
//
// Thread safety: not thread-safe; one optimizer per training loop.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ablate/status.h"
#include "ablate/trial_config.h"
#include "trainer/model/gpt.h"

namespace ablate::trainer {

struct OptimizerStats {
  double update_rms_spectral = 0;  // RMS of the applied update lr * Psi_p(.) over the spectral group
  double update_rms_adamw = 0;     // RMS of the applied update over the AdamW group
  double newton_residual = 0;      // max ||I - ZY||_F / sqrt(n) of the coupled Newton calls (0: none)
  std::string psi_route;           // route taken for the spectral group ("coupled_newton", ...)
};

class Optimizer {
 public:
  // params: the model's tensors (roles decide the groups); num_params: the buffer length.
  static StatusOr<std::unique_ptr<Optimizer>> Create(const config::OptimizerSection& cfg,
                                                     const std::vector<ParamTensor>& params,
                                                     size_t num_params);
  ~Optimizer();

  // One update. weights: (num_params) float, updated in place; grads: (num_params) float.
  // step: 1-based optimizer step (bias correction); lr_scale: the schedule's multiplier;
  // p: the spectral power for this step.
  Status Step(float* weights, const float* grads, int64_t step, double lr_scale, double p,
              OptimizerStats* stats);

  size_t state_bytes() const;       // bytes held for optimizer state now
  size_t state_bytes_fp32() const;  // what the same state costs in fp32
  int spectral_tensors() const;     // tensors in the spectral group

  // Serialized state (for checkpoints) and its inverse; Load checks the layout matches.
  std::string Save() const;
  Status Load(const std::string& blob);

 private:
  struct Slot;
  Optimizer() = default;
  config::OptimizerSection cfg_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<float> scratch_;  // per-step work space, sized for the largest tensor
};

}  // namespace ablate::trainer
