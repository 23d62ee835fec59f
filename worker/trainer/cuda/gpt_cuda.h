// The GPT model on the GPU: the device twin of trainer::Gpt (worker/trainer/model/gpt.h), same
// architecture, same parameter layout (taken from a CPU Gpt<float>), same weights (copied from it),
// forward and hand-written backward with the layers of kernels/layers/cuda and the attention
// kernels of kernels/attention/cuda (fpa, or SageBwd with every AttnOptions switch).
//
// Precision (documented choice, the llm.c recipe):
//   * fp32: master weights and gradients (one flat buffer each, the CPU layout), the residual
//     stream and its gradient, RMSNorm statistics, the attention LSE, losses, every reduction and
//     the arithmetic inside every fused kernel.
//   * bf16: a mirror of the weights (refreshed by WeightsUpdated after each optimizer step) and
//     every GEMM operand and output other than the residual stream's: the normalized
//     activations, the QKV projection (the fused split + QK-norm + RoPE kernel reads it, forward
//     and backward, as PyTorch autocast would), q/k/v/o, the merged heads, the MLP pre-activation
//     and activation (GELU in the cuBLASLt epilogue), the logits (turned into dlogits in place by
//     the fused classifier), and the activation gradients fed to GEMMs (the residual gradient's
//     bf16 copy comes out of the RMSNorm backward). GEMMs accumulate in fp32 (cuBLASLt); weight
//     gradients accumulate straight into the fp32 gradient buffer (beta = 1).
//   * SageBwd runs at the kernel's tiles (kSageBq x kSageBkv = 64 x 64, K / V quantized in
//     SageKvGroup's groups: 128 keys at head size 128 without Q-smoothing, else 64; the backward's
//     dS^ row scales over SageBwdKeyBlock's keys, the same 128 or 64), which the CPU backend runs
//     too (ToModelConfig: SageGpuTiles).
//   * attention.deterministic (the default): the backward reduces dQ over key blocks in a fixed
//     order (AttnDetScratchBytes of scratch, one buffer for all layers), so reruns are
//     bit-identical; off, fp32 atomics add the blocks in arrival order.
// Requirements beyond Gpt::Create: head size d_model / heads in {64, 128} (the attention kernels),
// B * heads <= 65535.
//
// Determinism: everything but the attention backward's dQ (fp32 atomics in both kernels) and
// the diagnostics' reductions is bit-identical run to run.
//
// Synchronization: Forward / Backward / ZeroGrad / WeightsUpdated only enqueue work on stream();
// TakeLoss, Loss, GradNormAndClip, GetWeights, GetGrads and AttentionDiagnostics synchronize.
// Thread safety: not thread-safe; one thread drives a GptCuda.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "ablate/gemm_tuning.h"
#include "ablate/status.h"
#include "layers/cuda/gemm_cuda.h"
#include "trainer/model/gpt.h"

namespace ablate::trainer::cuda {

class GptCuda {
 public:
  using LayerDiagnostics = Gpt<float>::LayerDiagnostics;

  // Takes the config, layout and weights of `model` (call model.Init first). Uses the current CUDA
  // device. InvalidArgument for configs the kernels cannot run; Internal for CUDA failures.
  static StatusOr<std::unique_ptr<GptCuda>> Create(const Gpt<float>& model);
  ~GptCuda();
  GptCuda(const GptCuda&) = delete;
  GptCuda& operator=(const GptCuda&) = delete;

  const ModelConfig& config() const { return cfg_; }
  const std::vector<ParamTensor>& params() const { return params_; }
  size_t num_params() const { return num_params_; }
  cudaStream_t stream() const { return stream_; }
  // Device buffers, (num_params) fp32 each, the CPU layout.
  float* weights() { return w_; }
  float* grads() { return g_; }

  // Host <-> device copies of the whole buffers (host arrays of num_params floats).
  Status SetWeights(const float* host);  // also refreshes the bf16 mirror
  Status GetWeights(float* host);
  Status GetGrads(float* host);
  // The bf16 mirror of weights() (num_params bf16 values, the flat layout) that the GEMMs read, for
  // an optimizer that writes it itself (DeviceOptimizer::SetBf16Mirror).
  void* bf16_weights() { return wb_; }
  // Call after anything changed weights() on the device (the optimizer step): refreshes the bf16
  // mirror, unless mirror_written says the change already wrote it (then a no-op).
  Status WeightsUpdated(bool mirror_written = false);

  Status ZeroGrad();
  // inputs, targets: host (B, seq_len) int32, tokens in [0, vocab) (not checked: the data pipeline
  // validates). Enqueues the forward pass, the loss and dlogits (scaled 1/(B T)); the mean loss is
  // added to a device accumulator that TakeLoss reads.
  Status Forward(const int32_t* inputs, const int32_t* targets, int B);
  // grads() += grad_scale * dLoss/dW of the last Forward (once per Forward; no-op without one).
  Status Backward(float grad_scale);
  // The sum of the mean losses of the Forwards since the last TakeLoss (synchronizes).
  StatusOr<double> TakeLoss();
  // Mean loss of one batch without touching the gradients. Reuses the training activations: the
  // last Forward's Backward and diagnostics must come before it (the loop's order).
  StatusOr<double> Loss(const int32_t* inputs, const int32_t* targets, int B);
  // The global L2 norm of grads() (before clipping, synchronizes); when max_norm > 0 and the norm
  // exceeds it, grads() *= max_norm / norm on the device.
  StatusOr<double> GradNormAndClip(double max_norm);

  // Per-layer SageBwd-vs-FPA shadow errors of the last Forward + Backward (Gpt's metrics): on the
  // q, k, v the layer's attention saw and the dO it received, over the first min(B, max_batch)
  // sequences, the SageBwd CUDA kernels (this model's options) against the FPA CUDA kernels, as
  // ErrorStats; p and ds emulated per (query, key) pair (diag_cuda.h); max_logit over
  // the whole batch; the QK-norm gain means now. FailedPrecondition without a Backward.
  StatusOr<std::vector<LayerDiagnostics>> AttentionDiagnostics(int max_batch = 1);

  double FlopsPerToken() const;

  // The GEMMs' algorithms (common/ablate/gemm_tuning.h; LtGemm::SetTuning, Tune and use): replay
  // a recorded table, or time cuBLASLt's candidates for every GEMM problem this model has run so
  // far (after a Forward + Backward and a Loss, that is every problem of a training step and an
  // evaluation) and keep the fastest.
  Status SetGemmTuning(std::shared_ptr<const GemmTuning> tuning);
  StatusOr<GemmTuning> TuneGemms(int candidates, int reps, double min_gain);
  kernels::cuda::LtGemm::Use GemmUse() const;

  // Marks the kinds of work of Forward, Backward, ZeroGrad, GradNormAndClip and WeightsUpdated on
  // `profiler` (a CudaStepProfiler on stream(); null: none). Not owned.
  void set_profiler(StepProfiler* profiler) { profiler_ = profiler; }

 private:
  struct Buffers;
  struct LayerIndex {
    size_t ln1, wqkv, q_gain, k_gain, wo, ln2, w_up, w_down;
  };
  GptCuda() = default;
  Status EnsureCapacity(int B);
  Status RunForward(const int32_t* inputs, const int32_t* targets, int B, bool training,
                    double* d_acc);

  ModelConfig cfg_;
  int head_dim_ = 0;
  std::vector<ParamTensor> params_;
  std::vector<LayerIndex> layer_index_;
  size_t wte_ = 0, lnf_ = 0, head_ = 0, num_params_ = 0;
  double flops_per_token_ = 0;

  cudaStream_t stream_ = nullptr;
  float* w_ = nullptr;   // fp32 master weights
  float* g_ = nullptr;   // fp32 gradients
  void* wb_ = nullptr;   // bf16 mirror of w_
  float* rope_cos_ = nullptr;
  float* rope_sin_ = nullptr;
  double* d_scalars_ = nullptr;  // [0] train loss sum, [1] eval loss, [2] grad sum of squares
  float* norm_scratch_ = nullptr;
  float* k_offset_ = nullptr;  // (layers, heads, D): attention.k_offset's vectors, or null
  StepProfiler* profiler_ = nullptr;
  void Mark(StepPhase p) { ProfileMark(profiler_, p); }
  size_t norm_scratch_floats_ = 0;
  std::unique_ptr<Buffers> buf_;
  int last_b_ = 0;
  bool forward_pending_ = false;
  bool backward_done_ = false;
  // GELU in the cuBLASLt epilogues (forward GELU_AUX, backward DGELU) until cuBLASLt says it has
  // no kernel for them; then the separate elementwise passes.
  bool gelu_epilogue_ = true;
  bool dgelu_epilogue_ = true;
};

}  // namespace ablate::trainer::cuda
