// The GPT model of the CPU trainer: parameters, forward, hand-written backward, diagnostics.
//
// Architecture (pre-norm decoder, no biases, no positional table):
//   x = wte[tokens]                                       (B, T, C)
//   per layer l:
//     a = RMSNorm(x; ln1)                                 (B, T, C)
//     q, k, v = a wq^T, a wk^T, a wv^T -> (B, H, T, D)    one GEMM with the adjacent [wq; wk; wv]
//     q, k = RMSNorm_D(q; q_gain), RMSNorm_D(k; k_gain)   optional QK-norm, (D) gains per layer
//     q, k = RoPE(q), RoPE(k)                             rotate-half pairing, base 10000
//     o = attention(q, k, v), causal                      fpa or the SageBwd emulator
//     x = x + merge(o) wo^T
//     x = x + act(RMSNorm(x; ln2) w_up^T) w_down^T        act: GELU (tanh) or ReLU^2, hidden 4C
//   logits = RMSNorm(x; lnf) head^T                       head = wte when tied
//   loss = mean over the B*T tokens of cross-entropy(logits, targets)
// RMSNorm eps = 1e-6 (kernels::kRmsNormEps), RoPE in kernels/layers/layers_cpu.h.
//
// Parameters live in one contiguous buffer (and gradients in a second one with the same layout),
// tensor after tensor, in this order:
//   wte (V, C) kEmbedding
//   per layer: h.{l}.ln1 (1, C) kVector, h.{l}.wq, h.{l}.wk, h.{l}.wv (C, C) kHidden (adjacent:
//   they form the (3C, C) QKV weight), [h.{l}.q_gain, h.{l}.k_gain (1, D) kVector, when qk_norm],
//   h.{l}.wo (C, C) kHidden, h.{l}.ln2 (1, C) kVector, h.{l}.w_up (4C, C) kHidden,
//   h.{l}.w_down (C, 4C) kHidden
//   lnf (1, C) kVector
//   head (V, C) kHead, only when the embeddings are untied
// Matrices are (out_features, in_features) row-major: y = x W^T.
//
// Init (Init(seed)): normal(0, init_std) for every matrix, init_std / sqrt(2 L) for the output
// projections (wo, w_down), gains 1. The normals come from std::mt19937_64 through a Box-Muller
// transform written here, generated in double and rounded to T, so a seed gives the same weights
// with every standard library and Gpt<float> holds Gpt<double>'s weights rounded to float.
//
// Memory: Forward keeps about 21 (B, T, C) float tensors per layer (4C-wide MLP activations
// count 4 each) plus the (B, T, V) logits; Loss needs one layer's worth; Backward's scratch is
// shared by all layers. At B = 64, T = 256, C = 256, L = 4 the process peaks near 1.8 GB.
//
// Thread safety: a Gpt is not thread-safe; call it from outside OpenMP parallel regions. Its
// methods parallelize internally with OpenMP (and OpenBLAS, whose GEMMs are issued from one
// thread). Results are bit-identical run to run for fixed thread counts. The OpenMP thread count
// does not change them (the layers and the attention library reduce in fixed orders); OpenBLAS's
// thread count and kernel choice can change the last bits of the weight gradients.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ablate/status.h"
#include "attention/attention_cpu.h"
#include "trainer/model/step_profile.h"

namespace ablate::trainer {

enum class MlpKind { kGelu, kRelu2 };

struct ModelConfig {
  int vocab_size = 256;
  int seq_len = 256;
  int layers = 4;
  int d_model = 256;
  int heads = 4;
  MlpKind mlp = MlpKind::kGelu;
  bool tie_embeddings = true;
  bool qk_norm = true;
  // The attention kind and its options, as the kernels take them (attention/attention.h): the
  // trial config's attention section (train_loop.cc) down to the CPU functions and the GPU
  // launchers. bq / bkv are the CPU emulator's tiles; the GPU kernels run their own.
  kernels::AttnOptions attention;
  float init_std = 0.02f;
  // attention.k_offset of the trial config: the sd of each channel of the fixed vector added to
  // every key of a head (after QK-norm and RoPE); 0 = none.
  float k_offset = 0.0f;
};

// kHidden: the 2-D hidden matrices (wq, wk, wv, wo, w_up, w_down), each its own tensor.
enum class ParamRole { kEmbedding, kHead, kHidden, kVector };

struct ParamTensor {
  std::string name;  // "wte", "h.0.wq", "lnf", ...
  int rows = 0;      // vectors have rows = 1
  int cols = 0;
  size_t offset = 0;  // into weights() / grads(), in elements
  ParamRole role = ParamRole::kVector;
  size_t numel() const { return size_t(rows) * size_t(cols); }
};

// T = float (the trainer) or double (finite-difference tests).
template <typename T>
class Gpt {
 public:
  // Validates the config: positive sizes, heads divide d_model, head size even (RoPE), SageBwd
  // tiles positive, init_std > 0. Weights start at zero: call Init.
  static StatusOr<Gpt> Create(const ModelConfig& config);
  Gpt(Gpt&&) noexcept;  // movable, not copyable
  Gpt& operator=(Gpt&&) noexcept;
  ~Gpt();

  const ModelConfig& config() const { return cfg_; }
  const std::vector<ParamTensor>& params() const { return params_; }
  size_t num_params() const { return num_params_; }
  // (num_params) T each, tensors at their offsets.
  T* weights() { return weights_.data(); }
  const T* weights() const { return weights_.data(); }
  T* grads() { return grads_.data(); }
  const T* grads() const { return grads_.data(); }
  // The fixed key offsets, (layers, heads, D), empty without attention.k_offset (the GPU model
  // copies them).
  const std::vector<T>& key_offsets() const { return k_offset_; }
  // The tensor called `name`, or null.
  const ParamTensor* FindParam(const std::string& name) const;

  void Init(uint64_t seed);

  // Marks the kinds of work of Forward, Backward and ZeroGrad on `profiler` (step_profile.h;
  // null: none). Not owned.
  void set_profiler(StepProfiler* profiler) { profiler_ = profiler; }

  // OK when every token of inputs and targets ((n) int32) lies in [0, vocab_size). Forward and
  // Loss assume it (they do not check: the data pipeline validates once).
  Status CheckTokens(const int32_t* tokens, int64_t n) const;

  // inputs, targets: (B, seq_len) int32, B >= 1. Returns the mean cross-entropy over the B*seq_len
  // tokens and keeps the activations for Backward and AttentionDiagnostics. Buffers grow on the
  // first call with a larger B and are reused afterwards (B may vary between calls).
  T Forward(const int32_t* inputs, const int32_t* targets, int B);

  void ZeroGrad();

  // Backpropagates the last Forward: grads() += grad_scale * dLoss/dW (grad_scale = 1/micro_steps
  // for gradient accumulation). Call once per Forward (it consumes the saved logits); it is a
  // no-op when there is no unconsumed Forward.
  void Backward(T grad_scale);

  // Mean loss, same computation as Forward (bit-identical result) but through separate buffers
  // that hold one layer's activations, so it leaves the last Forward/Backward state intact.
  T Loss(const int32_t* inputs, const int32_t* targets, int B);

  // Attention diagnostics on the last Forward + Backward batch (kernels/ALGORITHMS.md §3). For each layer,
  // on the q, k, v the layer's attention saw and the dO it received in Backward:
  //   o, dq, dk, dv, p, ds: SageBwd (config().attention, computed in T, exactly as the model's SageBwd
  //     path computes it) against exact attention computed in double, as kernels::ErrorStats
  //     (x = sage, y = exact). P and dS are the backward pass's (B, H, T, T) intermediates
  //     (kernels::SageDebug vs kernels::FpaIntermediates). Computed on the first
  //     min(B, max_batch) sequences of the batch (all heads) to bound the O(T^2) memory and time.
  //   max_logit: the largest pre-softmax logit tau * q.k (tau = 1/sqrt(D)) over all unmasked pairs
  //     of the whole batch, exact (unquantized, in T).
  //   q_gain_mean, k_gain_mean: the mean of the layer's QK-norm gains as they are now (after any
  //     optimizer step since the batch); 0 when qk_norm is off.
  // Works for either attention kind (for fpa models it shows what SageBwd would do).
  // FailedPrecondition unless Backward ran after the last Forward.
  struct LayerDiagnostics {
    int layer = 0;
    kernels::ErrorStats o, dq, dk, dv, p, ds;
    double max_logit = 0;
    double q_gain_mean = 0;
    double k_gain_mean = 0;
  };
  StatusOr<std::vector<LayerDiagnostics>> AttentionDiagnostics(int max_batch = 1);

  // The attention inputs of layer `layer` in the last Forward + Backward batch (the q, k, v it
  // saw after QK-norm and RoPE, and the dO it received), (B, H, T, D) each with shape.B = the
  // batch; valid until the next Forward. FailedPrecondition as for AttentionDiagnostics,
  // InvalidArgument for a layer out of range.
  struct AttentionInputs {
    kernels::AttnShape shape;
    const T *q = nullptr, *k = nullptr, *v = nullptr, *dout = nullptr;
  };
  StatusOr<AttentionInputs> LiveAttention(int layer);

  // Training FLOPs per token (forward + backward), the MFU numerator (kernels/ALGORITHMS.md §3):
  //   6 * N_matmul + 6 * L * C * T
  // N_matmul = L * 12 C^2 + V C: the weights that take part in a matmul per token (wq, wk, wv, wo,
  // w_up, w_down and the head, counted once even when tied to wte). The embedding lookup, gains
  // and elementwise ops are not counted. 6 L C T is causal attention: QK^T and PV are
  // 2 * 2 T C FLOPs per token per layer for full attention, halved by the mask, times 3 for
  // forward + backward (the MFU convention; the kernels' TOPS count the backward as 2.5x).
  double FlopsPerToken() const;

 private:
  struct LayerActs;
  struct Acts;
  // Offsets of one layer's tensors in weights() / grads(); q_gain, k_gain unused without qk_norm.
  struct LayerIndex {
    size_t ln1, wqkv, q_gain, k_gain, wo, ln2, w_up, w_down;
  };

  Gpt();
  void EnsureCapacity(Acts* acts, int B);
  T RunForward(const int32_t* inputs, const int32_t* targets, int B, Acts* acts);

  ModelConfig cfg_;
  int head_dim_ = 0;
  std::vector<ParamTensor> params_;
  std::vector<LayerIndex> layer_index_;
  size_t wte_ = 0, lnf_ = 0, head_ = 0;  // offsets (head_ == wte_ when tied)
  size_t num_params_ = 0;
  std::vector<T> weights_, grads_;
  std::vector<T> rope_cos_, rope_sin_;  // (seq_len, D/2)
  std::vector<T> k_offset_;             // (layers, heads, D) when cfg_.k_offset > 0, else empty
  StepProfiler* profiler_ = nullptr;
  void Mark(StepPhase p) { ProfileMark(profiler_, p); }

  // train_ keeps every layer's activations for Backward and the diagnostics; eval_ holds one
  // layer's worth, reused layer after layer, for Loss.
  std::unique_ptr<Acts> train_, eval_;
  std::vector<int32_t> inputs_, targets_;  // (last_b_, seq_len) of the last Forward
  int last_b_ = 0;
  bool forward_pending_ = false;  // Forward ran, its Backward not yet
  bool backward_done_ = false;    // Backward ran after the last Forward
};

extern template class Gpt<float>;
extern template class Gpt<double>;

}  // namespace ablate::trainer
