// The GPT model on the GPU: see gpt_cuda.h. Mirrors gpt.cc call by call.
#include "trainer/cuda/gpt_cuda.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "ablate/cuda_status.h"
#include "attention/cuda/attention_cuda.h"
#include "layers/cuda/gemm_cuda.h"
#include "layers/cuda/layers_cuda.h"
#include "layers/layers_cpu.h"
#include "trainer/cuda/diag_cuda.h"

namespace ablate::trainer::cuda {
namespace {

namespace kc = ::ablate::kernels::cuda;
namespace kk = ::ablate::kernels;
using bf16 = __nv_bfloat16;
using kc::OutType;

// Owns device allocations; frees them all on destruction.
class DeviceArena {
 public:
  DeviceArena() = default;
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;
  ~DeviceArena() { Clear(); }
  template <typename T>
  Status Alloc(T** out, size_t n) {
    void* p = nullptr;
    const size_t bytes = std::max<size_t>(n * sizeof(T), 256);
    ABLATE_RETURN_IF_ERROR(DeviceAlloc(&p, bytes, "activations"));
    ptrs_.push_back(p);
    *out = static_cast<T*>(p);
    return Status::Ok();
  }
  void Clear() {
    for (void* p : ptrs_) cudaFree(p);
    ptrs_.clear();
  }

 private:
  std::vector<void*> ptrs_;
};

}  // namespace

struct GptCuda::Buffers {
  DeviceArena arena;
  int capacity = 0;
  std::unique_ptr<kc::LtGemm> gemm;
  struct Layer {
    bf16* ln1 = nullptr;
    float* ln1_rstd = nullptr;
    bf16* qkv = nullptr;  // the QKV GEMM's output: the fused split/QK-norm/RoPE's input, both ways
    float *q_rstd = nullptr, *k_rstd = nullptr;
    bf16 *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr;
    float* lse = nullptr;
    void* sage_ws = nullptr;
    bf16* atty = nullptr;
    float* res_mid = nullptr;
    bf16* ln2 = nullptr;
    float* ln2_rstd = nullptr;
    bf16 *fch = nullptr, *fch_act = nullptr, *dout_att = nullptr;
  };
  std::vector<Layer> layers;
  std::vector<float*> res;
  size_t sage_ws_bytes = 0, fpa_ws_bytes = 0, rms_scratch_floats = 0;
  // attention.deterministic: the backward's dQ slices (AttnDetScratchBytes), one buffer for all
  // layers (it lives within one backward call).
  void* det_ws = nullptr;
  size_t det_ws_bytes = 0;
  // SageBwd with K-smoothing: the K mean's partial sums, made by the QK-norm / RoPE pass that
  // writes K and read by the next SageForwardCuda (one buffer for all layers: stream-ordered).
  double* k_parts = nullptr;
  bf16* lnf = nullptr;
  float* lnf_rstd = nullptr;
  bf16* logits = nullptr;
  float* losses = nullptr;
  float* dres = nullptr;
  bf16* dres_bf = nullptr;
  float* dln = nullptr;
  bf16 *datty = nullptr, *dfch_act = nullptr, *dfch = nullptr;
  bf16 *dq = nullptr, *dk = nullptr, *dv = nullptr;
  bf16* dqkv = nullptr;
  void* fpa_ws = nullptr;
  float* rms_scratch = nullptr;
  int32_t *inputs = nullptr, *targets = nullptr;
  int32_t* enc_plan = nullptr;  // device copy of enc.data
  kc::EncoderBackwardPlan enc;
  DiagScratch diag;
};

GptCuda::~GptCuda() {
  if (stream_) cudaStreamSynchronize(stream_);
  buf_.reset();
  cudaFree(w_);
  cudaFree(g_);
  cudaFree(wb_);
  cudaFree(rope_cos_);
  cudaFree(rope_sin_);
  cudaFree(d_scalars_);
  cudaFree(norm_scratch_);
  cudaFree(k_offset_);
  if (stream_) cudaStreamDestroy(stream_);
}

StatusOr<std::unique_ptr<GptCuda>> GptCuda::Create(const Gpt<float>& model) {
  const ModelConfig& c = model.config();
  const int D = c.d_model / c.heads;
  if (D != 64 && D != 128) {
    return InvalidArgument("device: cuda: head size d_model/heads = " + std::to_string(D) +
                           " is not supported by the attention kernels (64 or 128)");
  }
  if (c.attention.kind == kk::AttnKind::kSageBwd && c.attention.ds_bf16 &&
      (c.attention.smooth_q || c.attention.dq_kmean_correction)) {
    return InvalidArgument(
        "device: cuda: attention.ds_bf16 (the dS products in bf16) runs without "
        "attention.smooth_q and attention.dq_correction on the GPU; run that combination with "
        "device: cpu");
  }
  std::unique_ptr<GptCuda> g(new GptCuda());
  g->cfg_ = c;
  g->head_dim_ = D;
  g->params_ = model.params();
  g->num_params_ = model.num_params();
  g->flops_per_token_ = model.FlopsPerToken();
  auto off = [&](const std::string& name) -> size_t {
    const ParamTensor* p = model.FindParam(name);
    return p ? p->offset : 0;
  };
  g->wte_ = off("wte");
  g->lnf_ = off("lnf");
  g->head_ = c.tie_embeddings ? g->wte_ : off("head");
  for (int l = 0; l < c.layers; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    LayerIndex li{};
    li.ln1 = off(p + "ln1");
    li.wqkv = off(p + "wq");
    li.q_gain = c.qk_norm ? off(p + "q_gain") : 0;
    li.k_gain = c.qk_norm ? off(p + "k_gain") : 0;
    li.wo = off(p + "wo");
    li.ln2 = off(p + "ln2");
    li.w_up = off(p + "w_up");
    li.w_down = off(p + "w_down");
    g->layer_index_.push_back(li);
  }
  ABLATE_RETURN_IF_ERROR(CudaStatus(cudaStreamCreateWithFlags(&g->stream_, cudaStreamNonBlocking),
                                   "stream create"));
  const size_t P = g->num_params_;
  ABLATE_RETURN_IF_ERROR(DeviceAlloc(&g->w_, P * sizeof(float), "weights"));
  ABLATE_RETURN_IF_ERROR(DeviceAlloc(&g->g_, P * sizeof(float), "grads"));
  ABLATE_RETURN_IF_ERROR(DeviceAlloc(&g->wb_, P * sizeof(bf16), "bf16 weights"));
  ABLATE_RETURN_IF_ERROR(DeviceAlloc(&g->d_scalars_, 8 * sizeof(double), "scalars"));
  ABLATE_RETURN_IF_ERROR(CudaStatus(cudaMemset(g->d_scalars_, 0, 8 * sizeof(double)), "memset"));
  g->norm_scratch_floats_ = kc::SumSquaresScratch(P);
  ABLATE_RETURN_IF_ERROR(
      DeviceAlloc(&g->norm_scratch_, g->norm_scratch_floats_ * sizeof(float), "norm scratch"));
  const size_t nr = size_t(c.seq_len) * (D / 2);
  std::vector<float> cs(nr), sn(nr);
  kk::RopeTables(cs.data(), sn.data(), c.seq_len, D);
  ABLATE_RETURN_IF_ERROR(DeviceAlloc(&g->rope_cos_, nr * sizeof(float), "rope tables"));
  ABLATE_RETURN_IF_ERROR(DeviceAlloc(&g->rope_sin_, nr * sizeof(float), "rope tables"));
  ABLATE_RETURN_IF_ERROR(CudaStatus(
      cudaMemcpy(g->rope_cos_, cs.data(), nr * sizeof(float), cudaMemcpyHostToDevice), "copy"));
  ABLATE_RETURN_IF_ERROR(CudaStatus(
      cudaMemcpy(g->rope_sin_, sn.data(), nr * sizeof(float), cudaMemcpyHostToDevice), "copy"));
  if (const std::vector<float>& off = model.key_offsets(); !off.empty()) {
    ABLATE_RETURN_IF_ERROR(DeviceAlloc(&g->k_offset_, off.size() * sizeof(float), "key offsets"));
    ABLATE_RETURN_IF_ERROR(CudaStatus(
        cudaMemcpy(g->k_offset_, off.data(), off.size() * sizeof(float), cudaMemcpyHostToDevice),
        "copy"));
  }
  g->buf_ = std::make_unique<Buffers>();
  ABLATE_ASSIGN_OR_RETURN(g->buf_->gemm, kc::LtGemm::Create());
  ABLATE_RETURN_IF_ERROR(g->SetWeights(model.weights()));
  ABLATE_RETURN_IF_ERROR(g->ZeroGrad());
  return g;
}

Status GptCuda::SetGemmTuning(std::shared_ptr<const GemmTuning> tuning) {
  return buf_->gemm->SetTuning(std::move(tuning));
}

StatusOr<GemmTuning> GptCuda::TuneGemms(int candidates, int reps, double min_gain) {
  return buf_->gemm->Tune(candidates, reps, min_gain, stream_);
}

kc::LtGemm::Use GptCuda::GemmUse() const { return buf_->gemm->use(); }

Status GptCuda::SetWeights(const float* host) {
  ABLATE_RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(w_, host, num_params_ * sizeof(float), cudaMemcpyHostToDevice, stream_),
      "upload weights"));
  ABLATE_RETURN_IF_ERROR(WeightsUpdated());
  return CudaStatus(cudaStreamSynchronize(stream_), "upload weights");
}

Status GptCuda::GetWeights(float* host) {
  ABLATE_RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(host, w_, num_params_ * sizeof(float), cudaMemcpyDeviceToHost, stream_),
      "download weights"));
  return CudaStatus(cudaStreamSynchronize(stream_), "download weights");
}

Status GptCuda::GetGrads(float* host) {
  ABLATE_RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(host, g_, num_params_ * sizeof(float), cudaMemcpyDeviceToHost, stream_),
      "download grads"));
  return CudaStatus(cudaStreamSynchronize(stream_), "download grads");
}

Status GptCuda::WeightsUpdated(bool mirror_written) {
  if (mirror_written) return Status::Ok();
  Mark(StepPhase::kOptimizer);
  return kc::CastCuda<float, bf16>(static_cast<bf16*>(wb_), w_, int64_t(num_params_), stream_);
}

Status GptCuda::ZeroGrad() {
  Mark(StepPhase::kElementwise);
  return CudaStatus(cudaMemsetAsync(g_, 0, num_params_ * sizeof(float), stream_), "zero grads");
}

Status GptCuda::EnsureCapacity(int B) {
  Buffers& b = *buf_;
  if (B <= b.capacity) return Status::Ok();
  if (int64_t(B) * cfg_.heads > 65535) {
    return InvalidArgument("device: cuda: micro_batch x heads = " +
                           std::to_string(int64_t(B) * cfg_.heads) + " exceeds 65535");
  }
  ABLATE_RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream_), "sync"));
  b.arena.Clear();
  b.diag = DiagScratch();
  b.capacity = 0;
  const size_t Tn = cfg_.seq_len, C = cfg_.d_model, V = cfg_.vocab_size, H = cfg_.heads;
  const size_t N = size_t(B) * Tn, NC = N * C, NH = N * H;
  const bool fpa = cfg_.attention.kind == kernels::AttnKind::kFpa;
  const kk::AttnShape shape{B, int(H), int(Tn), head_dim_, true};
  const kk::AttnOptions& sopt = cfg_.attention;
  b.sage_ws_bytes = fpa ? 0 : kk::SageWorkspaceBytes(shape);
  b.fpa_ws_bytes = kk::FpaWorkspaceBytes(shape);
  b.det_ws_bytes = kk::AttnDetScratchBytes(shape, sopt);
  b.rms_scratch_floats = std::max({kc::RmsNormBackwardScratch(int64_t(N), int(C)),
                                   kc::RmsNormBackwardFusedScratch(int64_t(N), int(C)),
                                   kc::QkvNormRopeBackwardScratch(B, int(Tn), int(H), head_dim_),
                                   kc::EncoderBackwardScratch(int64_t(N), int(C))});
  DeviceArena& a = b.arena;
  b.k_parts = nullptr;
  if (!fpa && sopt.smooth_k) {
    const int parts = kk::SageKMeanParts(int(Tn)).parts;
    ABLATE_RETURN_IF_ERROR(a.Alloc(&b.k_parts, size_t(B) * H * parts * size_t(head_dim_)));
  }
  b.layers.assign(cfg_.layers, {});
  for (auto& la : b.layers) {
    ABLATE_RETURN_IF_ERROR(a.Alloc(&la.ln1, NC));
    ABLATE_RETURN_IF_ERROR(a.Alloc(&la.ln1_rstd, N));
    ABLATE_RETURN_IF_ERROR(a.Alloc(&la.qkv, 3 * NC));
    if (cfg_.qk_norm) {
      ABLATE_RETURN_IF_ERROR(a.Alloc(&la.q_rstd, NH));
      ABLATE_RETURN_IF_ERROR(a.Alloc(&la.k_rstd, NH));
    }
    ABLATE_RETURN_IF_ERROR(a.Alloc(&la.q, NC));
    ABLATE_RETURN_IF_ERROR(a.Alloc(&la.k, NC));
    ABLATE_RETURN_IF_ERROR(a.Alloc(&la.v, NC));
    ABLATE_RETURN_IF_ERROR(a.Alloc(&la.o, NC));
    ABLATE_RETURN_IF_ERROR(a.Alloc(&la.lse, NH));
    if (!fpa) {
      char* ws = nullptr;
      ABLATE_RETURN_IF_ERROR(a.Alloc(&ws, b.sage_ws_bytes));
      la.sage_ws = ws;
    }
    ABLATE_RETURN_IF_ERROR(a.Alloc(&la.atty, NC));
    ABLATE_RETURN_IF_ERROR(a.Alloc(&la.res_mid, NC));
    ABLATE_RETURN_IF_ERROR(a.Alloc(&la.ln2, NC));
    ABLATE_RETURN_IF_ERROR(a.Alloc(&la.ln2_rstd, N));
    ABLATE_RETURN_IF_ERROR(a.Alloc(&la.fch, 4 * NC));
    ABLATE_RETURN_IF_ERROR(a.Alloc(&la.fch_act, 4 * NC));
    ABLATE_RETURN_IF_ERROR(a.Alloc(&la.dout_att, NC));
  }
  b.res.assign(cfg_.layers + 1, nullptr);
  for (auto& r : b.res) ABLATE_RETURN_IF_ERROR(a.Alloc(&r, NC));
  ABLATE_RETURN_IF_ERROR(a.Alloc(&b.lnf, NC));
  ABLATE_RETURN_IF_ERROR(a.Alloc(&b.lnf_rstd, N));
  ABLATE_RETURN_IF_ERROR(a.Alloc(&b.logits, N * V));
  ABLATE_RETURN_IF_ERROR(a.Alloc(&b.losses, N));
  ABLATE_RETURN_IF_ERROR(a.Alloc(&b.dres, NC));
  ABLATE_RETURN_IF_ERROR(a.Alloc(&b.dres_bf, NC));
  ABLATE_RETURN_IF_ERROR(a.Alloc(&b.dln, NC));
  ABLATE_RETURN_IF_ERROR(a.Alloc(&b.datty, NC));
  ABLATE_RETURN_IF_ERROR(a.Alloc(&b.dfch_act, 4 * NC));
  ABLATE_RETURN_IF_ERROR(a.Alloc(&b.dfch, 4 * NC));
  ABLATE_RETURN_IF_ERROR(a.Alloc(&b.dq, NC));
  ABLATE_RETURN_IF_ERROR(a.Alloc(&b.dk, NC));
  ABLATE_RETURN_IF_ERROR(a.Alloc(&b.dv, NC));
  ABLATE_RETURN_IF_ERROR(a.Alloc(&b.dqkv, 3 * NC));
  char* fws = nullptr;
  ABLATE_RETURN_IF_ERROR(a.Alloc(&fws, b.fpa_ws_bytes));
  b.fpa_ws = fws;
  if (b.det_ws_bytes > 0) {
    char* dws = nullptr;
    ABLATE_RETURN_IF_ERROR(a.Alloc(&dws, b.det_ws_bytes));
    b.det_ws = dws;
  }
  ABLATE_RETURN_IF_ERROR(a.Alloc(&b.rms_scratch, b.rms_scratch_floats));
  ABLATE_RETURN_IF_ERROR(a.Alloc(&b.inputs, N));
  ABLATE_RETURN_IF_ERROR(a.Alloc(&b.targets, N));
  ABLATE_RETURN_IF_ERROR(a.Alloc(&b.enc_plan, kc::EncoderBackwardPlanInts(int64_t(N))));
  b.capacity = B;
  return Status::Ok();
}

#define RET ABLATE_RETURN_IF_ERROR

Status GptCuda::RunForward(const int32_t* inputs, const int32_t* targets, int B, bool training,
                           double* d_acc) {
  RET(EnsureCapacity(B));
  Buffers& b = *buf_;
  const int Tn = cfg_.seq_len, C = cfg_.d_model, V = cfg_.vocab_size, H = cfg_.heads;
  const int D = head_dim_;
  const int64_t N = int64_t(B) * Tn;
  const float* w = w_;
  const bf16* wb = static_cast<const bf16*>(wb_);
  const kk::AttnShape shape{B, H, Tn, D, /*causal=*/true};
  cudaStream_t s = stream_;
  kc::LtGemm& gemm = *b.gemm;

  Mark(StepPhase::kCopy);
  RET(CudaStatus(cudaMemcpyAsync(b.inputs, inputs, N * sizeof(int32_t), cudaMemcpyHostToDevice, s),
                "upload inputs"));
  RET(CudaStatus(cudaMemcpyAsync(b.targets, targets, N * sizeof(int32_t), cudaMemcpyHostToDevice, s),
                "upload targets"));
  if (training) {
    kc::BuildEncoderBackwardPlan(inputs, N, V, &b.enc);
    RET(CudaStatus(cudaMemcpyAsync(b.enc_plan, b.enc.data.data(), b.enc.data.size() * sizeof(int32_t),
                                  cudaMemcpyHostToDevice, s), "upload embedding plan"));
  }
  const kk::AttnOptions& sopt = cfg_.attention;
  const int k_rows_per_part = kk::SageKMeanParts(Tn).rows_per_part;  // with b.k_parts

  Mark(StepPhase::kEmbedding);
  RET(kc::EncoderForwardCuda(b.res[0], b.inputs, w + wte_, N, C, s));
  for (int l = 0; l < cfg_.layers; ++l) {
    const LayerIndex& li = layer_index_[l];
    Buffers::Layer& la = b.layers[l];
    const float* x = b.res[l];
    float* out = b.res[l + 1];
    Mark(StepPhase::kNormRope);
    RET((kc::RmsNormForwardCuda<float, bf16>(la.ln1, la.ln1_rstd, x, w + li.ln1, N, C, s)));
    // QKV in bf16 (PyTorch autocast's precision), then split + QK-norm + RoPE in one pass.
    Mark(StepPhase::kGemm);
    RET(gemm.Forward(la.qkv, OutType::kBF16, la.ln1, wb + li.wqkv, N, C, 3 * C, 1.f, 0.f, nullptr,
                     s));
    // With SageBwd's K-smoothing the same pass sums K for its mean (no K-mean pass over K).
    Mark(StepPhase::kNormRope);
    RET(kc::QkvNormRopeForwardCuda(
        la.q, la.k, la.v, la.q_rstd, la.k_rstd, la.qkv, cfg_.qk_norm ? w + li.q_gain : nullptr,
        cfg_.qk_norm ? w + li.k_gain : nullptr, rope_cos_, rope_sin_, B, Tn, H, D, s, b.k_parts,
        k_rows_per_part, k_offset_ ? k_offset_ + size_t(l) * H * D : nullptr));
    Mark(StepPhase::kAttentionForward);
    if (cfg_.attention.kind == kernels::AttnKind::kFpa) {
      RET(kk::FpaForwardCuda(shape, la.q, la.k, la.v, la.o, la.lse, s));
    } else {
      RET(kk::SageForwardCuda(shape, sopt, la.q, la.k, la.v, la.o, la.lse, la.sage_ws,
                              b.sage_ws_bytes, s, b.k_parts));
    }
    Mark(StepPhase::kNormRope);
    RET(kc::HeadsMergeForwardCuda<bf16>(la.atty, la.o, B, Tn, H, D, s));
    // res_mid = x + atty wo^T (the residual fused into the GEMM's C operand).
    Mark(StepPhase::kGemm);
    RET(gemm.Forward(la.res_mid, OutType::kF32, la.atty, wb + li.wo, N, C, C, 1.f, 1.f, x, s));
    Mark(StepPhase::kNormRope);
    RET((kc::RmsNormForwardCuda<float, bf16>(la.ln2, la.ln2_rstd, la.res_mid, w + li.ln2, N, C, s)));
    bool gelu_done = false;
    Mark(StepPhase::kGemm);
    if (cfg_.mlp == MlpKind::kGelu && gelu_epilogue_) {
      // GELU in the up-projection's epilogue: fch = pre-activation, fch_act = GELU(fch).
      const Status st = gemm.ForwardGelu(la.fch_act, la.fch, la.ln2, wb + li.w_up, N, C, 4 * C, s);
      if (st.ok()) {
        gelu_done = true;
      } else if (st.code() == StatusCode::kUnimplemented) {
        gelu_epilogue_ = false;  // this cuBLASLt has no such kernel: the separate pass from now on
      } else {
        return st;
      }
    }
    if (!gelu_done) {
      RET(gemm.Forward(la.fch, OutType::kBF16, la.ln2, wb + li.w_up, N, C, 4 * C, 1.f, 0.f, nullptr,
                       s));
      Mark(StepPhase::kElementwise);
      if (cfg_.mlp == MlpKind::kGelu) {
        RET((kc::GeluForwardCuda<bf16, bf16>(la.fch_act, la.fch, N * 4 * C, s)));
      } else {
        RET((kc::Relu2ForwardCuda<bf16, bf16>(la.fch_act, la.fch, N * 4 * C, s)));
      }
    }
    Mark(StepPhase::kGemm);
    RET(gemm.Forward(out, OutType::kF32, la.fch_act, wb + li.w_down, N, 4 * C, C, 1.f, 1.f,
                     la.res_mid, s));
  }
  Mark(StepPhase::kNormRope);
  RET((kc::RmsNormForwardCuda<float, bf16>(b.lnf, b.lnf_rstd, b.res[cfg_.layers], w + lnf_, N, C, s)));
  Mark(StepPhase::kGemm);
  RET(gemm.Forward(b.logits, OutType::kBF16, b.lnf, wb + head_, N, C, V, 1.f, 0.f, nullptr, s));
  // dlogits (in place, scaled by the mean's 1/N; Backward's grad_scale rides on the GEMM alphas).
  Mark(StepPhase::kLoss);
  RET(kc::SoftmaxCrossEntropyCuda<bf16>(b.losses, training ? b.logits : nullptr, b.logits,
                                        b.targets, N, V, 1.0f / float(N), s));
  return kc::AccumulateMeanCuda(d_acc, b.losses, N, s);
}

Status GptCuda::Forward(const int32_t* inputs, const int32_t* targets, int B) {
  forward_pending_ = false;
  backward_done_ = false;
  RET(RunForward(inputs, targets, B, /*training=*/true, d_scalars_ + 0));
  last_b_ = B;
  forward_pending_ = true;
  return Status::Ok();
}

StatusOr<double> GptCuda::TakeLoss() {
  double v = 0;
  RET(CudaStatus(cudaMemcpyAsync(&v, d_scalars_, sizeof(double), cudaMemcpyDeviceToHost, stream_),
                "read loss"));
  RET(CudaStatus(cudaMemsetAsync(d_scalars_, 0, sizeof(double), stream_), "reset loss"));
  RET(CudaStatus(cudaStreamSynchronize(stream_), "read loss"));
  return v;
}

StatusOr<double> GptCuda::Loss(const int32_t* inputs, const int32_t* targets, int B) {
  forward_pending_ = false;
  backward_done_ = false;
  RET(CudaStatus(cudaMemsetAsync(d_scalars_ + 1, 0, sizeof(double), stream_), "reset"));
  RET(RunForward(inputs, targets, B, /*training=*/false, d_scalars_ + 1));
  double v = 0;
  RET(CudaStatus(cudaMemcpyAsync(&v, d_scalars_ + 1, sizeof(double), cudaMemcpyDeviceToHost, stream_),
                "read loss"));
  RET(CudaStatus(cudaStreamSynchronize(stream_), "eval loss"));
  return v;
}

Status GptCuda::Backward(float grad_scale) {
  if (!forward_pending_) return Status::Ok();
  forward_pending_ = false;
  Buffers& b = *buf_;
  const int B = last_b_;
  const int Tn = cfg_.seq_len, C = cfg_.d_model, V = cfg_.vocab_size, H = cfg_.heads;
  const int D = head_dim_;
  const int64_t N = int64_t(B) * Tn, NC = N * C;
  const float* w = w_;
  const bf16* wb = static_cast<const bf16*>(wb_);
  float* g = g_;
  const kk::AttnShape shape{B, H, Tn, D, /*causal=*/true};
  cudaStream_t s = stream_;
  kc::LtGemm& gemm = *b.gemm;
  const kk::AttnOptions& sopt = cfg_.attention;
  float* rs = b.rms_scratch;
  const size_t rsn = b.rms_scratch_floats;

  // The residual stream's RMSNorm backward: dres (+)= ..., and dres_bf = bf16(dres) for the next
  // GEMMs, in one pass where C allows.
  auto rms_backward = [&](bool accumulate, float* dweight, const float* inp, const float* weight,
                          const float* rstd) -> Status {
    if (C <= 1024) {
      return kc::RmsNormBackwardFusedCuda(b.dres, b.dres_bf, accumulate, dweight, b.dln, inp,
                                          weight, rstd, N, C, rs, rsn, s);
    }
    RET((kc::RmsNormBackwardCuda<float, float>(b.dres, accumulate, dweight, b.dln, inp, weight,
                                               rstd, N, C, rs, rsn, s)));
    return kc::CastCuda<float, bf16>(b.dres_bf, b.dres, NC, s);
  };
  const bf16* dlogits = b.logits;
  Mark(StepPhase::kGemm);
  RET(gemm.BackwardData(b.dln, OutType::kF32, dlogits, wb + head_, N, C, V, grad_scale, 0.f, s));
  RET(gemm.BackwardWeight(g + head_, dlogits, b.lnf, N, C, V, grad_scale, 1.f, s));
  Mark(StepPhase::kNormRope);
  RET(rms_backward(false, g + lnf_, b.res[cfg_.layers], w + lnf_, b.lnf_rstd));
  for (int l = cfg_.layers - 1; l >= 0; --l) {
    const LayerIndex& li = layer_index_[l];
    Buffers::Layer& la = b.layers[l];
    // MLP.
    bool dgelu_done = false;
    Mark(StepPhase::kGemm);
    if (cfg_.mlp == MlpKind::kGelu && dgelu_epilogue_) {
      const Status st =
          gemm.BackwardDataDGelu(b.dfch, b.dres_bf, wb + li.w_down, la.fch, N, 4 * C, C, s);
      if (st.ok()) {
        dgelu_done = true;
      } else if (st.code() == StatusCode::kUnimplemented) {
        dgelu_epilogue_ = false;
      } else {
        return st;
      }
    }
    if (!dgelu_done) {
      RET(gemm.BackwardData(b.dfch_act, OutType::kBF16, b.dres_bf, wb + li.w_down, N, 4 * C, C, 1.f,
                            0.f, s));
      Mark(StepPhase::kElementwise);
      if (cfg_.mlp == MlpKind::kGelu) {
        RET(kc::GeluBackwardCuda<bf16>(b.dfch, false, la.fch, b.dfch_act, N * 4 * C, s));
      } else {
        RET(kc::Relu2BackwardCuda<bf16>(b.dfch, false, la.fch, b.dfch_act, N * 4 * C, s));
      }
    }
    Mark(StepPhase::kGemm);
    RET(gemm.BackwardWeight(g + li.w_down, b.dres_bf, la.fch_act, N, 4 * C, C, 1.f, 1.f, s));
    RET(gemm.BackwardData(b.dln, OutType::kF32, b.dfch, wb + li.w_up, N, C, 4 * C, 1.f, 0.f, s));
    RET(gemm.BackwardWeight(g + li.w_up, b.dfch, la.ln2, N, C, 4 * C, 1.f, 1.f, s));
    Mark(StepPhase::kNormRope);
    RET(rms_backward(true, g + li.ln2, la.res_mid, w + li.ln2, la.ln2_rstd));
    // Attention.
    Mark(StepPhase::kGemm);
    RET(gemm.BackwardData(b.datty, OutType::kBF16, b.dres_bf, wb + li.wo, N, C, C, 1.f, 0.f, s));
    RET(gemm.BackwardWeight(g + li.wo, b.dres_bf, la.atty, N, C, C, 1.f, 1.f, s));
    Mark(StepPhase::kNormRope);
    RET(kc::HeadsMergeBackwardCuda<bf16>(la.dout_att, b.datty, B, Tn, H, D, s));
    Mark(StepPhase::kAttentionBackward);
    if (cfg_.attention.kind == kernels::AttnKind::kFpa) {
      RET(kk::AttnBackwardCuda(shape, sopt, la.q, la.k, la.v, la.o, la.lse, la.dout_att, b.dq, b.dk,
                               b.dv, b.fpa_ws, b.fpa_ws_bytes, s, b.det_ws, b.det_ws_bytes));
    } else {
      RET(kk::AttnBackwardCuda(shape, sopt, la.q, la.k, la.v, la.o, la.lse, la.dout_att, b.dq, b.dk,
                               b.dv, la.sage_ws, b.sage_ws_bytes, s, b.det_ws, b.det_ws_bytes));
    }
    const bool qn = cfg_.qk_norm;
    Mark(StepPhase::kNormRope);
    RET(kc::QkvNormRopeBackwardCuda(
        b.dqkv, qn ? g + li.q_gain : nullptr, qn ? g + li.k_gain : nullptr, b.dq, b.dk, b.dv,
        la.qkv, qn ? w + li.q_gain : nullptr, qn ? w + li.k_gain : nullptr, la.q_rstd, la.k_rstd,
        rope_cos_, rope_sin_, B, Tn, H, D, rs, rsn, s));
    Mark(StepPhase::kGemm);
    RET(gemm.BackwardData(b.dln, OutType::kF32, b.dqkv, wb + li.wqkv, N, C, 3 * C, 1.f, 0.f, s));
    RET(gemm.BackwardWeight(g + li.wqkv, b.dqkv, la.ln1, N, C, 3 * C, 1.f, 1.f, s));
    Mark(StepPhase::kNormRope);
    RET(rms_backward(true, g + li.ln1, b.res[l], w + li.ln1, la.ln1_rstd));
  }
  Mark(StepPhase::kEmbedding);
  RET(kc::EncoderBackwardPlannedCuda(g + wte_, b.dres, b.enc, b.enc_plan, C, b.rms_scratch,
                                     b.rms_scratch_floats, s));
  backward_done_ = true;
  return Status::Ok();
}

StatusOr<double> GptCuda::GradNormAndClip(double max_norm) {
  double* d_ss = d_scalars_ + 2;
  Mark(StepPhase::kGradNorm);
  RET(kc::SumSquaresCuda(d_ss, g_, num_params_, norm_scratch_, norm_scratch_floats_, stream_));
  RET(kc::ClipByNormCuda(g_, num_params_, d_ss, max_norm, stream_));
  double ss = 0;
  RET(CudaStatus(cudaMemcpyAsync(&ss, d_ss, sizeof(double), cudaMemcpyDeviceToHost, stream_),
                "read grad norm"));
  RET(CudaStatus(cudaStreamSynchronize(stream_), "grad norm"));
  return std::sqrt(ss);
}

StatusOr<std::vector<GptCuda::LayerDiagnostics>> GptCuda::AttentionDiagnostics(int max_batch) {
  if (!backward_done_) {
    return FailedPrecondition("attention diagnostics need a Forward followed by its Backward");
  }
  if (max_batch < 1) return InvalidArgument("max_batch must be >= 1");
  Buffers& b = *buf_;
  const int B = last_b_, nb = std::min(B, max_batch);
  const int Tn = cfg_.seq_len, H = cfg_.heads, D = head_dim_;
  const kk::AttnOptions& sopt = cfg_.attention;
  std::vector<float> gains;
  if (cfg_.qk_norm) {
    gains.resize(num_params_);
    RET(GetWeights(gains.data()));
  }
  std::vector<LayerDiagnostics> out;
  for (int l = 0; l < cfg_.layers; ++l) {
    const Buffers::Layer& la = b.layers[l];
    LayerDiagnostics d;
    d.layer = l;
    LayerShadowInput in{nb, B, H, Tn, D, la.q, la.k, la.v, la.dout_att};
    LayerShadowErrors e;
    RET(ShadowAttentionErrors(in, sopt, &b.diag, &e, stream_));
    d.o = e.o;
    d.dq = e.dq;
    d.dk = e.dk;
    d.dv = e.dv;
    d.p = e.p;
    d.ds = e.ds;
    d.max_logit = e.max_logit;
    if (cfg_.qk_norm) {
      const LayerIndex& li = layer_index_[l];
      double sq = 0, sk = 0;
      for (int i = 0; i < D; ++i) {
        sq += double(gains[li.q_gain + i]);
        sk += double(gains[li.k_gain + i]);
      }
      d.q_gain_mean = sq / D;
      d.k_gain_mean = sk / D;
    }
    out.push_back(d);
  }
  return out;
}

double GptCuda::FlopsPerToken() const { return flops_per_token_; }

}  // namespace ablate::trainer::cuda
