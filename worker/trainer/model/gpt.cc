// The GPT model: see gpt.h for the architecture, the parameter layout and the contracts.
#include "trainer/model/gpt.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "layers/layers_cpu.h"

namespace ablate::trainer {
namespace {

namespace k = ::ablate::kernels;

// Standard normals from mt19937_64 through Box-Muller, both values of each pair used. Written out
// (instead of std::normal_distribution) because the standard leaves that algorithm open.
class NormalStream {
 public:
  explicit NormalStream(uint64_t seed) : rng_(seed) {}
  double Next() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    // u1 in (0, 1] keeps the log finite; 53 random bits each.
    const double u1 = double((rng_() >> 11) + 1) * 0x1.0p-53;
    const double u2 = double(rng_() >> 11) * 0x1.0p-53;
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double a = 2.0 * M_PI * u2;
    spare_ = r * std::sin(a);
    has_spare_ = true;
    return r * std::cos(a);
  }

 private:
  std::mt19937_64 rng_;
  bool has_spare_ = false;
  double spare_ = 0;
};

template <typename T>
void Zero(std::vector<T>& v, size_t n) {
  std::memset(v.data(), 0, sizeof(T) * n);
}

}  // namespace

// One layer's saved activations; sizes for the batch capacity B (N = B * T tokens).
template <typename T>
struct Gpt<T>::LayerActs {
  std::vector<T> ln1, ln1_rstd;   // (B, T, C), (B, T)
  std::vector<T> q_raw, k_raw;    // (B, H, T, D) before QK-norm (qk_norm only)
  std::vector<T> q_rstd, k_rstd;  // (B, H, T) (qk_norm only)
  std::vector<T> q, k, v;         // (B, H, T, D) the attention inputs (after QK-norm and RoPE)
  std::vector<T> o, lse;          // (B, H, T, D), (B, H, T) (lse: fpa only)
  kernels::SageSaved<T> sage;     // sagebwd only
  std::vector<T> atty;            // (B, T, C) merged heads, input of wo
  std::vector<T> res_mid;         // (B, T, C) residual after attention
  std::vector<T> ln2, ln2_rstd;   // (B, T, C), (B, T)
  std::vector<T> fch, fch_act;    // (B, T, 4C) before / after the activation
  std::vector<T> dout_att;        // (B, H, T, D) dO of the last Backward (training only)
};

template <typename T>
struct Gpt<T>::Acts {
  bool training = false;
  int capacity = 0;                      // batch size the buffers hold
  std::vector<LayerActs> layers;         // L (training) or 1 (eval)
  std::vector<std::vector<T>> residual;  // (B, T, C) each; L + 1 (training) or 2 (eval)
  std::vector<T> qkv;                    // (B, T, 3C) scratch
  std::vector<T> lnf, lnf_rstd;          // (B, T, C), (B, T)
  std::vector<T> logits;                 // (B, T, V); Backward turns it into dlogits in place
  std::vector<T> losses;                 // (B, T)
  // Backward scratch (training only), activation gradients of one layer at a time.
  std::vector<T> dres;            // (B, T, C) gradient of the residual stream
  std::vector<T> dln, datty;      // (B, T, C)
  std::vector<T> dfch_act, dfch;  // (B, T, 4C)
  std::vector<T> dq, dk, dv;      // (B, H, T, D) from attention backward
  std::vector<T> dq_n, dk_n;      // (B, H, T, D) after RoPE backward (qk_norm only)
  std::vector<T> dq_raw, dk_raw;  // (B, H, T, D) before QK-norm / RoPE
  std::vector<T> dqkv;            // (B, T, 3C)

  LayerActs& layer(int l) { return layers[std::min<size_t>(l, layers.size() - 1)]; }
  std::vector<T>& res(int l) { return residual[l % residual.size()]; }
};

template <typename T>
Gpt<T>::Gpt() = default;
template <typename T>
Gpt<T>::Gpt(Gpt&&) noexcept = default;
template <typename T>
Gpt<T>& Gpt<T>::operator=(Gpt&&) noexcept = default;
template <typename T>
Gpt<T>::~Gpt() = default;

template <typename T>
StatusOr<Gpt<T>> Gpt<T>::Create(const ModelConfig& c) {
  auto positive = [](int v, const char* name) -> Status {
    if (v <= 0)
      return InvalidArgument(std::string("model.") + name + ": must be positive, got " +
                             std::to_string(v));
    return Status::Ok();
  };
  ABLATE_RETURN_IF_ERROR(positive(c.vocab_size, "vocab_size"));
  ABLATE_RETURN_IF_ERROR(positive(c.seq_len, "seq_len"));
  ABLATE_RETURN_IF_ERROR(positive(c.layers, "layers"));
  ABLATE_RETURN_IF_ERROR(positive(c.d_model, "d_model"));
  ABLATE_RETURN_IF_ERROR(positive(c.heads, "heads"));
  if (c.d_model % c.heads != 0) {
    return InvalidArgument("model.heads: " + std::to_string(c.heads) + " does not divide d_model " +
                           std::to_string(c.d_model));
  }
  const int D = c.d_model / c.heads;
  if (D % 2 != 0) {
    return InvalidArgument("model: head size d_model/heads = " + std::to_string(D) +
                           " must be even (RoPE rotates pairs)");
  }
  if (c.attention.bq <= 0 || c.attention.bkv <= 0) {
    return InvalidArgument("attention: SageBwd tiles must be positive, got bq " +
                           std::to_string(c.attention.bq) + ", bkv " + std::to_string(c.attention.bkv));
  }
  if (!(c.init_std > 0) || !std::isfinite(c.init_std)) {
    return InvalidArgument("model.init_std: must be a positive number");
  }

  Gpt g;
  g.cfg_ = c;
  g.head_dim_ = D;
  const int C = c.d_model, V = c.vocab_size;
  size_t off = 0;
  auto add = [&](std::string name, int rows, int cols, ParamRole role) {
    g.params_.push_back({std::move(name), rows, cols, off, role});
    off += size_t(rows) * cols;
    return g.params_.back().offset;
  };
  g.wte_ = add("wte", V, C, ParamRole::kEmbedding);
  for (int l = 0; l < c.layers; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    LayerIndex li{};
    li.ln1 = add(p + "ln1", 1, C, ParamRole::kVector);
    li.wqkv = add(p + "wq", C, C, ParamRole::kHidden);
    add(p + "wk", C, C, ParamRole::kHidden);
    add(p + "wv", C, C, ParamRole::kHidden);
    if (c.qk_norm) {
      li.q_gain = add(p + "q_gain", 1, D, ParamRole::kVector);
      li.k_gain = add(p + "k_gain", 1, D, ParamRole::kVector);
    }
    li.wo = add(p + "wo", C, C, ParamRole::kHidden);
    li.ln2 = add(p + "ln2", 1, C, ParamRole::kVector);
    li.w_up = add(p + "w_up", 4 * C, C, ParamRole::kHidden);
    li.w_down = add(p + "w_down", C, 4 * C, ParamRole::kHidden);
    g.layer_index_.push_back(li);
  }
  g.lnf_ = add("lnf", 1, C, ParamRole::kVector);
  g.head_ = c.tie_embeddings ? g.wte_ : add("head", V, C, ParamRole::kHead);
  g.num_params_ = off;
  g.weights_.assign(off, T(0));
  g.grads_.assign(off, T(0));
  g.rope_cos_.resize(size_t(c.seq_len) * (D / 2));
  g.rope_sin_.resize(size_t(c.seq_len) * (D / 2));
  k::RopeTables(g.rope_cos_.data(), g.rope_sin_.data(), c.seq_len, D);
  if (!(c.k_offset >= 0) || !std::isfinite(c.k_offset)) {
    return InvalidArgument("attention.k_offset: must be a non-negative number");
  }
  if (c.k_offset > 0) {  // fixed, not trained: the same vectors for every seed
    NormalStream normal(0x6b6f6666736574ull);
    g.k_offset_.resize(size_t(c.layers) * c.heads * D);
    for (T& x : g.k_offset_) x = T(double(c.k_offset) * normal.Next());
  }
  g.train_ = std::make_unique<Acts>();
  g.train_->training = true;
  g.eval_ = std::make_unique<Acts>();
  return g;
}

template <typename T>
const ParamTensor* Gpt<T>::FindParam(const std::string& name) const {
  for (const ParamTensor& p : params_) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

template <typename T>
void Gpt<T>::Init(uint64_t seed) {
  NormalStream normal(seed);
  const double proj_std = double(cfg_.init_std) / std::sqrt(2.0 * cfg_.layers);
  for (const ParamTensor& p : params_) {
    T* w = weights_.data() + p.offset;
    if (p.role == ParamRole::kVector) {
      std::fill(w, w + p.numel(), T(1));
      continue;
    }
    const bool out_proj = p.name.ends_with(".wo") || p.name.ends_with(".w_down");
    const double std = out_proj ? proj_std : double(cfg_.init_std);
    for (size_t i = 0; i < p.numel(); ++i) w[i] = T(std * normal.Next());
  }
}

template <typename T>
Status Gpt<T>::CheckTokens(const int32_t* tokens, int64_t n) const {
  for (int64_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= cfg_.vocab_size) {
      return OutOfRange("token " + std::to_string(tokens[i]) + " at position " + std::to_string(i) +
                        " is outside the vocabulary [0, " + std::to_string(cfg_.vocab_size) + ")");
    }
  }
  return Status::Ok();
}

template <typename T>
void Gpt<T>::EnsureCapacity(Acts* a, int B) {
  if (B <= a->capacity) return;
  const size_t Tn = cfg_.seq_len, C = cfg_.d_model, V = cfg_.vocab_size, H = cfg_.heads;
  const size_t N = size_t(B) * Tn, NC = N * C, NH = N * H;
  const bool fpa = cfg_.attention.kind == kernels::AttnKind::kFpa;
  const int L = cfg_.layers;
  a->layers.resize(a->training ? L : 1);
  for (LayerActs& la : a->layers) {
    la.ln1.resize(NC);
    la.ln1_rstd.resize(N);
    if (cfg_.qk_norm) {
      la.q_raw.resize(NC);
      la.k_raw.resize(NC);
      la.q_rstd.resize(NH);
      la.k_rstd.resize(NH);
    }
    la.q.resize(NC);
    la.k.resize(NC);
    la.v.resize(NC);
    la.o.resize(NC);
    if (fpa) la.lse.resize(NH);
    la.atty.resize(NC);
    la.res_mid.resize(NC);
    la.ln2.resize(NC);
    la.ln2_rstd.resize(N);
    la.fch.resize(4 * NC);
    la.fch_act.resize(4 * NC);
    if (a->training) la.dout_att.resize(NC);
  }
  a->residual.resize(a->training ? L + 1 : 2);
  for (auto& r : a->residual) r.resize(NC);
  a->qkv.resize(3 * NC);
  a->lnf.resize(NC);
  a->lnf_rstd.resize(N);
  a->logits.resize(N * V);
  a->losses.resize(N);
  if (a->training) {
    for (auto* v : {&a->dres, &a->dln, &a->datty, &a->dq, &a->dk, &a->dv, &a->dq_raw, &a->dk_raw}) {
      v->resize(NC);
    }
    if (cfg_.qk_norm) {
      a->dq_n.resize(NC);
      a->dk_n.resize(NC);
    }
    a->dfch_act.resize(4 * NC);
    a->dfch.resize(4 * NC);
    a->dqkv.resize(3 * NC);
  }
  a->capacity = B;
}

template <typename T>
T Gpt<T>::RunForward(const int32_t* inputs, const int32_t* targets, int B, Acts* a) {
  EnsureCapacity(a, B);
  const int Tn = cfg_.seq_len, C = cfg_.d_model, V = cfg_.vocab_size, H = cfg_.heads;
  const int D = head_dim_;
  const int64_t N = int64_t(B) * Tn, BH = int64_t(B) * H;
  const T* w = weights_.data();
  const kernels::AttnShape shape{B, H, Tn, D, /*causal=*/true};

  Mark(StepPhase::kEmbedding);
  k::EncoderForward(a->res(0).data(), inputs, w + wte_, N, C);
  for (int l = 0; l < cfg_.layers; ++l) {
    const LayerIndex& li = layer_index_[l];
    LayerActs& la = a->layer(l);
    const T* x = a->res(l).data();
    T* out = a->res(l + 1).data();

    Mark(StepPhase::kNormRope);
    k::RmsNormForward(la.ln1.data(), la.ln1_rstd.data(), x, w + li.ln1, N, C);
    Mark(StepPhase::kGemm);
    k::MatmulForward(a->qkv.data(), la.ln1.data(), w + li.wqkv, N, C, 3 * C);
    Mark(StepPhase::kNormRope);
    if (cfg_.qk_norm) {
      k::QkvSplitForward(la.q_raw.data(), la.k_raw.data(), la.v.data(), a->qkv.data(), B, Tn, H, D);
      k::RmsNormForward(la.q.data(), la.q_rstd.data(), la.q_raw.data(), w + li.q_gain, N * H, D);
      k::RmsNormForward(la.k.data(), la.k_rstd.data(), la.k_raw.data(), w + li.k_gain, N * H, D);
    } else {
      k::QkvSplitForward(la.q.data(), la.k.data(), la.v.data(), a->qkv.data(), B, Tn, H, D);
    }
    k::RopeForward(la.q.data(), la.q.data(), rope_cos_.data(), rope_sin_.data(), BH, Tn, D);
    k::RopeForward(la.k.data(), la.k.data(), rope_cos_.data(), rope_sin_.data(), BH, Tn, D);
    if (!k_offset_.empty()) {  // a constant: the backward passes dK through unchanged
      k::AddHeadOffset(la.k.data(), k_offset_.data() + size_t(l) * H * D, BH, H, Tn, D);
    }
    Mark(StepPhase::kAttentionForward);
    if (cfg_.attention.kind == kernels::AttnKind::kFpa) {
      k::FpaForward(shape, la.q.data(), la.k.data(), la.v.data(), la.o.data(), la.lse.data());
    } else {
      k::SageForward(shape, cfg_.attention, la.q.data(), la.k.data(), la.v.data(), la.o.data(),
                     &la.sage);
    }
    Mark(StepPhase::kNormRope);
    k::HeadsMergeForward(la.atty.data(), la.o.data(), B, Tn, H, D);
    Mark(StepPhase::kGemm);
    k::MatmulForward(la.res_mid.data(), la.atty.data(), w + li.wo, N, C, C);
    Mark(StepPhase::kElementwise);
    k::ResidualForward(la.res_mid.data(), x, la.res_mid.data(), N * C);

    Mark(StepPhase::kNormRope);
    k::RmsNormForward(la.ln2.data(), la.ln2_rstd.data(), la.res_mid.data(), w + li.ln2, N, C);
    Mark(StepPhase::kGemm);
    k::MatmulForward(la.fch.data(), la.ln2.data(), w + li.w_up, N, C, 4 * C);
    Mark(StepPhase::kElementwise);
    if (cfg_.mlp == MlpKind::kGelu) {
      k::GeluForward(la.fch_act.data(), la.fch.data(), N * 4 * C);
    } else {
      k::Relu2Forward(la.fch_act.data(), la.fch.data(), N * 4 * C);
    }
    Mark(StepPhase::kGemm);
    k::MatmulForward(out, la.fch_act.data(), w + li.w_down, N, 4 * C, C);
    Mark(StepPhase::kElementwise);
    k::ResidualForward(out, la.res_mid.data(), out, N * C);
  }
  Mark(StepPhase::kNormRope);
  k::RmsNormForward(a->lnf.data(), a->lnf_rstd.data(), a->res(cfg_.layers).data(), w + lnf_, N, C);
  Mark(StepPhase::kGemm);
  k::MatmulForward(a->logits.data(), a->lnf.data(), w + head_, N, C, V);
  Mark(StepPhase::kLoss);
  k::SoftmaxCrossEntropy(a->losses.data(), static_cast<T*>(nullptr), a->logits.data(), targets, N,
                         V, T(0));
  // Sequential double sum: the mean does not depend on the thread count.
  double sum = 0;
  for (int64_t i = 0; i < N; ++i) sum += double(a->losses[i]);
  return T(sum / double(N));
}

template <typename T>
T Gpt<T>::Forward(const int32_t* inputs, const int32_t* targets, int B) {
  const size_t n = size_t(B) * cfg_.seq_len;
  inputs_.assign(inputs, inputs + n);
  targets_.assign(targets, targets + n);
  last_b_ = B;
  forward_pending_ = true;
  backward_done_ = false;
  return RunForward(inputs, targets, B, train_.get());
}

template <typename T>
T Gpt<T>::Loss(const int32_t* inputs, const int32_t* targets, int B) {
  return RunForward(inputs, targets, B, eval_.get());
}

template <typename T>
void Gpt<T>::ZeroGrad() {
  Mark(StepPhase::kElementwise);
  std::fill(grads_.begin(), grads_.end(), T(0));
}

template <typename T>
void Gpt<T>::Backward(T grad_scale) {
  if (!forward_pending_) return;
  forward_pending_ = false;
  Acts* a = train_.get();
  const int B = last_b_;
  const int Tn = cfg_.seq_len, C = cfg_.d_model, V = cfg_.vocab_size, H = cfg_.heads;
  const int D = head_dim_;
  const int64_t N = int64_t(B) * Tn, NC = N * C, BH = int64_t(B) * H;
  const T* w = weights_.data();
  T* g = grads_.data();
  const kernels::AttnShape shape{B, H, Tn, D, /*causal=*/true};

  // The loss is a mean over N tokens; grad_scale rides on dlogits, and everything downstream is
  // linear in it.
  T* dlogits = a->logits.data();
  Mark(StepPhase::kLoss);
  k::SoftmaxCrossEntropy(static_cast<T*>(nullptr), dlogits, a->logits.data(), targets_.data(), N, V,
                         grad_scale / T(N));
  Mark(StepPhase::kElementwise);
  Zero(a->dln, NC);
  Mark(StepPhase::kGemm);
  k::MatmulBackward(a->dln.data(), g + head_, dlogits, a->lnf.data(), w + head_, N, C, V);
  Mark(StepPhase::kElementwise);
  Zero(a->dres, NC);
  Mark(StepPhase::kNormRope);
  k::RmsNormBackward(a->dres.data(), g + lnf_, a->dln.data(), a->res(cfg_.layers).data(), w + lnf_,
                     a->lnf_rstd.data(), N, C);

  for (int l = cfg_.layers - 1; l >= 0; --l) {
    const LayerIndex& li = layer_index_[l];
    LayerActs& la = a->layer(l);
    // a->dres holds dL/d(layer output) and becomes dL/d(layer input): the residual branches add
    // into it.
    T* dres = a->dres.data();

    // MLP: out = res_mid + w_down(act(w_up(ln2(res_mid)))).
    Mark(StepPhase::kElementwise);
    Zero(a->dfch_act, 4 * NC);
    Mark(StepPhase::kGemm);
    k::MatmulBackward(a->dfch_act.data(), g + li.w_down, dres, la.fch_act.data(), w + li.w_down, N,
                      4 * C, C);
    Mark(StepPhase::kElementwise);
    Zero(a->dfch, 4 * NC);
    if (cfg_.mlp == MlpKind::kGelu) {
      k::GeluBackward(a->dfch.data(), la.fch.data(), a->dfch_act.data(), N * 4 * C);
    } else {
      k::Relu2Backward(a->dfch.data(), la.fch.data(), a->dfch_act.data(), N * 4 * C);
    }
    Zero(a->dln, NC);
    Mark(StepPhase::kGemm);
    k::MatmulBackward(a->dln.data(), g + li.w_up, a->dfch.data(), la.ln2.data(), w + li.w_up, N, C,
                      4 * C);
    Mark(StepPhase::kNormRope);
    k::RmsNormBackward(dres, g + li.ln2, a->dln.data(), la.res_mid.data(), w + li.ln2,
                       la.ln2_rstd.data(), N, C);

    // Attention: res_mid = x + wo(merge(attention(rope(qknorm(q)), rope(qknorm(k)), v))).
    Mark(StepPhase::kElementwise);
    Zero(a->datty, NC);
    Mark(StepPhase::kGemm);
    k::MatmulBackward(a->datty.data(), g + li.wo, dres, la.atty.data(), w + li.wo, N, C, C);
    Mark(StepPhase::kElementwise);
    Zero(la.dout_att, NC);
    Mark(StepPhase::kNormRope);
    k::HeadsMergeBackward(la.dout_att.data(), a->datty.data(), B, Tn, H, D);
    Mark(StepPhase::kAttentionBackward);
    if (cfg_.attention.kind == kernels::AttnKind::kFpa) {
      k::FpaBackward(shape, la.q.data(), la.k.data(), la.v.data(), la.o.data(), la.lse.data(),
                     la.dout_att.data(), a->dq.data(), a->dk.data(), a->dv.data());
    } else {
      k::SageBackward(shape, cfg_.attention, la.q.data(), la.k.data(), la.v.data(), la.o.data(),
                      la.dout_att.data(), la.sage, a->dq.data(), a->dk.data(), a->dv.data());
    }
    // RoPE backward lands in dq_n/dk_n when QK-norm follows, else directly in dq_raw/dk_raw.
    T* dq_rot = cfg_.qk_norm ? a->dq_n.data() : a->dq_raw.data();
    T* dk_rot = cfg_.qk_norm ? a->dk_n.data() : a->dk_raw.data();
    Mark(StepPhase::kElementwise);
    std::memset(dq_rot, 0, sizeof(T) * NC);
    std::memset(dk_rot, 0, sizeof(T) * NC);
    Mark(StepPhase::kNormRope);
    k::RopeBackward(dq_rot, a->dq.data(), rope_cos_.data(), rope_sin_.data(), BH, Tn, D);
    k::RopeBackward(dk_rot, a->dk.data(), rope_cos_.data(), rope_sin_.data(), BH, Tn, D);
    if (cfg_.qk_norm) {
      Mark(StepPhase::kElementwise);
      Zero(a->dq_raw, NC);
      Zero(a->dk_raw, NC);
      Mark(StepPhase::kNormRope);
      k::RmsNormBackward(a->dq_raw.data(), g + li.q_gain, dq_rot, la.q_raw.data(), w + li.q_gain,
                         la.q_rstd.data(), N * H, D);
      k::RmsNormBackward(a->dk_raw.data(), g + li.k_gain, dk_rot, la.k_raw.data(), w + li.k_gain,
                         la.k_rstd.data(), N * H, D);
    }
    Mark(StepPhase::kElementwise);
    Zero(a->dqkv, 3 * NC);
    Mark(StepPhase::kNormRope);
    k::QkvSplitBackward(a->dqkv.data(), a->dq_raw.data(), a->dk_raw.data(), a->dv.data(), B, Tn, H,
                        D);
    Mark(StepPhase::kElementwise);
    Zero(a->dln, NC);
    Mark(StepPhase::kGemm);
    k::MatmulBackward(a->dln.data(), g + li.wqkv, a->dqkv.data(), la.ln1.data(), w + li.wqkv, N, C,
                      3 * C);
    Mark(StepPhase::kNormRope);
    k::RmsNormBackward(dres, g + li.ln1, a->dln.data(), a->res(l).data(), w + li.ln1,
                       la.ln1_rstd.data(), N, C);
  }
  Mark(StepPhase::kEmbedding);
  k::EncoderBackward(g + wte_, a->dres.data(), inputs_.data(), N, C);
  backward_done_ = true;
}

template <typename T>
StatusOr<typename Gpt<T>::AttentionInputs> Gpt<T>::LiveAttention(int layer) {
  if (!backward_done_) {
    return FailedPrecondition("the attention inputs need a Forward followed by its Backward");
  }
  if (layer < 0 || layer >= cfg_.layers) {
    return InvalidArgument("layer " + std::to_string(layer) + " of a model with " +
                           std::to_string(cfg_.layers) + " layers");
  }
  const LayerActs& la = train_->layer(layer);
  AttentionInputs in;
  in.shape = {last_b_, cfg_.heads, cfg_.seq_len, head_dim_, /*causal=*/true};
  in.q = la.q.data();
  in.k = la.k.data();
  in.v = la.v.data();
  in.dout = la.dout_att.data();
  return in;
}

template <typename T>
StatusOr<std::vector<typename Gpt<T>::LayerDiagnostics>> Gpt<T>::AttentionDiagnostics(
    int max_batch) {
  if (!backward_done_) {
    return FailedPrecondition("attention diagnostics need a Forward followed by its Backward");
  }
  if (max_batch < 1) return InvalidArgument("max_batch must be >= 1");
  Acts* a = train_.get();
  const int B = last_b_, nb = std::min(B, max_batch);
  const int Tn = cfg_.seq_len, H = cfg_.heads, D = head_dim_;
  const kernels::AttnShape sub{nb, H, Tn, D, /*causal=*/true};
  const int64_t n = sub.numel(), npp = int64_t(nb) * H * Tn * Tn;
  const double tau = 1.0 / std::sqrt(double(D));

  std::vector<T> o_s(n), dq_s(n), dk_s(n), dv_s(n);
  std::vector<double> q_d(n), k_d(n), v_d(n), do_d(n), o_d(n), lse_d(sub.rows()), dq_d(n), dk_d(n),
      dv_d(n), p_d, ds_d;
  std::vector<T> scores(size_t(Tn) * Tn);
  std::vector<LayerDiagnostics> out;
  for (int l = 0; l < cfg_.layers; ++l) {
    const LayerActs& la = a->layer(l);
    const T* q = la.q.data();
    const T* kk = la.k.data();
    const T* v = la.v.data();
    const T* dO = la.dout_att.data();
    LayerDiagnostics d;
    d.layer = l;

    // The first nb sequences are the leading nb*H*T*D elements of the (B, H, T, D) tensors.
    kernels::SageSaved<T> saved;
    kernels::SageDebug<T> dbg;
    k::SageForward(sub, cfg_.attention, q, kk, v, o_s.data(), &saved);
    k::SageBackward(sub, cfg_.attention, q, kk, v, o_s.data(), dO, saved, dq_s.data(), dk_s.data(),
                    dv_s.data(), &dbg);
    for (int64_t i = 0; i < n; ++i) {
      q_d[i] = q[i];
      k_d[i] = kk[i];
      v_d[i] = v[i];
      do_d[i] = dO[i];
    }
    k::FpaForward(sub, q_d.data(), k_d.data(), v_d.data(), o_d.data(), lse_d.data());
    k::FpaBackward(sub, q_d.data(), k_d.data(), v_d.data(), o_d.data(), lse_d.data(), do_d.data(),
                   dq_d.data(), dk_d.data(), dv_d.data());
    k::FpaIntermediates(sub, q_d.data(), k_d.data(), v_d.data(), o_d.data(), lse_d.data(),
                        do_d.data(), &p_d, &ds_d);
    d.o = k::CompareTensors(o_s.data(), o_d.data(), n);
    d.dq = k::CompareTensors(dq_s.data(), dq_d.data(), n);
    d.dk = k::CompareTensors(dk_s.data(), dk_d.data(), n);
    d.dv = k::CompareTensors(dv_s.data(), dv_d.data(), n);
    d.p = k::CompareTensors(dbg.p.data(), p_d.data(), npp);
    d.ds = k::CompareTensors(dbg.ds.data(), ds_d.data(), npp);

    // Max logit over the whole batch: S = Q K^T per (b, h) by GEMM, max over the causal triangle.
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t bh = 0; bh < int64_t(B) * H; ++bh) {
      const T* qb = q + bh * Tn * D;
      const T* kb = kk + bh * Tn * D;
      k::MatmulForward(scores.data(), qb, kb, Tn, D, Tn);
      for (int i = 0; i < Tn; ++i) {
        const T* row = scores.data() + size_t(i) * Tn;
        for (int j = 0; j <= i; ++j) mx = std::max(mx, double(row[j]));
      }
    }
    d.max_logit = mx * tau;
    if (cfg_.qk_norm) {
      const LayerIndex& li = layer_index_[l];
      double sq = 0, sk = 0;
      for (int i = 0; i < D; ++i) {
        sq += double(weights_[li.q_gain + i]);
        sk += double(weights_[li.k_gain + i]);
      }
      d.q_gain_mean = sq / D;
      d.k_gain_mean = sk / D;
    }
    out.push_back(d);
  }
  return out;
}

template <typename T>
double Gpt<T>::FlopsPerToken() const {
  const double L = cfg_.layers, C = cfg_.d_model, V = cfg_.vocab_size, Tn = cfg_.seq_len;
  const double n_matmul = L * 12.0 * C * C + V * C;
  return 6.0 * n_matmul + 6.0 * L * C * Tn;
}

template class Gpt<float>;
template class Gpt<double>;

}  // namespace ablate::trainer
