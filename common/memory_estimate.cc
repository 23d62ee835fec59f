#include "ablate/memory_estimate.h"

#include <algorithm>

namespace ablate::config {

int64_t ParameterCount(const TrialConfig& c) {
  const int64_t C = c.model.d_model, L = c.model.layers;
  const int64_t V = c.data.vocab_size > 0 ? c.data.vocab_size : 256;
  const int64_t D = c.model.heads > 0 ? C / c.model.heads : C;
  int64_t per_layer = 2 * C + 12 * C * C;  // ln1, ln2; wq wk wv wo (4 C^2), w_up w_down (8 C^2)
  if (c.attention.qk_norm) per_layer += 2 * D;
  int64_t p = V * C + L * per_layer + C;
  if (!c.model.tie_embeddings) p += V * C;
  return p;
}

int64_t EstimateDeviceBytes(const TrialConfig& c) {
  const int64_t P = ParameterCount(c);
  const int64_t C = c.model.d_model, L = c.model.layers;
  const int64_t V = c.data.vocab_size > 0 ? c.data.vocab_size : 256;
  const int64_t B = std::max(1, c.train.micro_batch), T = c.model.seq_len;
  int64_t bytes = kContextBytes;
  bytes += P * (4 + 4 + 2);  // fp32 weights, fp32 gradients, bf16 copy
  if (c.optimizer.state_bits == 8) {
    bytes += P * 2 + P / 16;  // two 8-bit moments and their block scales
  } else {
    bytes += P * 8;  // two fp32 moments
  }
  if (c.optimizer.kind == "spectral") {
    const int64_t big = 4 * C;  // the largest matrix side (w_up / w_down)
    bytes += 6 * big * C * 4;   // Newton-Schulz / coupled-Newton iterates and Gram matrices
  }
  bytes += int64_t(24) * B * T * C * L * 4;  // activations kept for the backward
  bytes += int64_t(2) * B * T * V * 4;       // logits and their gradient
  if (c.attention.deterministic) {
    // The deterministic backward's dQ slices: one fp32 (B, T, C) slice per 128 keys (per 64 for
    // SageBwd at head dim 64), shared by the layers (kernels/attention/cuda/attention_cuda.h).
    const int hd = c.model.heads > 0 ? int(C / c.model.heads) : 64;
    const int64_t keys = c.attention.kind == "sagebwd" && hd <= 64 ? 64 : 128;
    bytes += (T + keys - 1) / keys * B * T * (C + c.model.heads) * 4;
  }
  return bytes;
}

}  // namespace ablate::config
