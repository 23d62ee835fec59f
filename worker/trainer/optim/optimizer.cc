#include "trainer/optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "optim/optim_cpu.h"
#include "quant/quant_cpu.h"
#include "spectral/spectral_cpu.h"

namespace ablate::trainer {
namespace {

using kernels::BlockQuantizedTensor;
using kernels::QuantScheme;

// One state tensor (m, v or momentum): fp32, or blockwise 8-bit.
class StateBuf {
 public:
  StateBuf(int64_t n, bool quantized, QuantScheme scheme, bool is_signed)
      : n_(n), quantized_(quantized) {
    if (quantized) {
      q_ = BlockQuantizedTensor(n, scheme, is_signed);
    } else {
      f_.assign(size_t(n), 0.0f);
    }
  }
  // A float view to update in place: the fp32 storage itself, or `scratch` holding the dequantized
  // values. Close() stores the view back.
  float* Open(float* scratch) {
    if (!quantized_) return f_.data();
    q_.Dequantize(scratch);
    return scratch;
  }
  void Close(const float* view) {
    if (quantized_) q_.Quantize(view);
  }
  size_t bytes() const { return quantized_ ? q_.bytes() : f_.size() * sizeof(float); }
  size_t bytes_fp32() const { return size_t(n_) * sizeof(float); }

  void Save(std::string* out) const {
    if (quantized_) {
      out->append(reinterpret_cast<const char*>(q_.codes()), size_t(n_));
      out->append(reinterpret_cast<const char*>(q_.scales()), sizeof(float) * q_.num_blocks());
    } else {
      out->append(reinterpret_cast<const char*>(f_.data()), f_.size() * sizeof(float));
    }
  }
  // Reads this state from blob at *pos; false when the blob is too short.
  bool Load(const std::string& blob, size_t* pos) {
    size_t need = bytes();
    if (blob.size() - *pos < need) return false;
    const char* p = blob.data() + *pos;
    if (quantized_) {
      std::memcpy(q_.mutable_codes(), p, size_t(n_));
      std::memcpy(q_.mutable_scales(), p + n_, sizeof(float) * q_.num_blocks());
    } else {
      std::memcpy(f_.data(), p, need);
    }
    *pos += need;
    return true;
  }

 private:
  int64_t n_;
  bool quantized_;
  std::vector<float> f_;
  BlockQuantizedTensor q_;
};

kernels::PsiMethod ParseMethod(const std::string& m) {
  if (m == "newton_schulz") return kernels::PsiMethod::kNewtonSchulz;
  if (m == "coupled_newton") return kernels::PsiMethod::kCoupledNewton;
  if (m == "eigh") return kernels::PsiMethod::kEigh;
  return kernels::PsiMethod::kAuto;
}

}  // namespace

struct Optimizer::Slot {
  ParamTensor t;
  int64_t n = 0;
  bool spectral = false;
  bool matrix = false;
  double lr = 0;
  std::vector<StateBuf> states;  // adamw / rms: {m, v}; momentum: {B}
};

Optimizer::~Optimizer() = default;

StatusOr<std::unique_ptr<Optimizer>> Optimizer::Create(const config::OptimizerSection& cfg,
                                                       const std::vector<ParamTensor>& params,
                                                       size_t num_params) {
  std::unique_ptr<Optimizer> opt(new Optimizer());
  opt->cfg_ = cfg;
  const bool spectral_kind = cfg.kind == "spectral";
  const bool momentum = spectral_kind && cfg.family == "momentum";
  const QuantScheme scheme =
      cfg.state_quant == "linear" ? QuantScheme::kLinear : QuantScheme::kDynamic;
  const QuantScheme v_scheme =
      cfg.state_quant_v == "linear" ? QuantScheme::kLinear : QuantScheme::kDynamic;
  size_t largest = 0;
  for (const auto& t : params) {
    auto slot = std::make_unique<Slot>();
    slot->t = t;
    slot->n = int64_t(t.rows) * t.cols;
    if (t.offset + size_t(slot->n) > num_params) {
      return Internal("optimizer: tensor " + t.name + " lies outside the parameter buffer");
    }
    slot->matrix = t.role != ParamRole::kVector && t.rows > 1 && t.cols > 1;
    const bool embedding_like = t.role == ParamRole::kEmbedding || t.role == ParamRole::kHead;
    slot->spectral = spectral_kind && slot->matrix && (!embedding_like || cfg.spectral_embeddings);
    if (slot->spectral) {
      slot->lr = cfg.lr;
    } else if (spectral_kind) {
      slot->lr = cfg.lr_vector;
    } else {
      slot->lr = slot->matrix ? cfg.lr : cfg.lr_vector;
    }
    const bool q8 = cfg.state_bits == 8 && slot->matrix;
    if (slot->spectral && momentum) {
      slot->states.emplace_back(slot->n, q8, scheme, true);
    } else {
      slot->states.emplace_back(slot->n, q8, scheme, true);   // m (signed)
      // v >= 0 takes the unsigned dynamic code unless state_quant_v says linear (the unstable
      // baseline): under a linear code every entry below absmax/510 of its block decodes to 0,
      // and m / (sqrt(v) + eps) is inflated.
      slot->states.emplace_back(slot->n, q8, v_scheme, false);
    }
    largest = std::max(largest, size_t(slot->n));
    opt->slots_.push_back(std::move(slot));
  }
  opt->scratch_.resize(4 * largest);
  return opt;
}

Status Optimizer::Step(float* weights, const float* grads, int64_t step, double lr_scale, double p,
                       OptimizerStats* stats) {
  const auto& c = cfg_;
  const kernels::AdamScalars adam = kernels::MakeAdamScalars(c.beta1, c.beta2, c.eps, step);
  const bool momentum_family = c.kind == "spectral" && c.family == "momentum";
  kernels::PsiOptions popt;
  popt.method = ParseMethod(c.psi_method);
  popt.ns_steps = c.ns_steps;
  popt.newton_iters = c.newton_iters;
  double sq_spec = 0, sq_adam = 0;
  int64_t n_spec = 0, n_adam = 0;
  double residual = 0;
  std::string route;

  for (auto& sp : slots_) {
    Slot& s = *sp;
    const int64_t n = s.n;
    float* w = weights + s.t.offset;
    const float* g = grads + s.t.offset;
    float* buf0 = scratch_.data();
    float* buf1 = buf0 + n;
    float* dir = buf1 + n;   // the direction fed to Psi
    float* upd = dir + n;    // Psi's output
    const float lr = kernels::StepLr(s.lr, lr_scale);
    const float decay = kernels::DecayFactor(s.matrix, c.weight_decay, lr);

    if (!s.spectral) {  // AdamW
      float* m = s.states[0].Open(buf0);
      float* v = s.states[1].Open(buf1);
      sq_adam += kernels::AdamWUpdate(w, m, v, g, n, adam, lr, decay);
      s.states[0].Close(m);
      s.states[1].Close(v);
      n_adam += n;
      continue;
    }

    if (momentum_family) {
      float* B = s.states[0].Open(buf0);
      const float mu = float(c.momentum);
      const bool ema = c.momentum_kind == "ema";
      const float gain = ema ? 1 - mu : 1.0f;
      kernels::MomentumDirection(dir, B, g, n, mu, gain, c.nesterov);
      s.states[0].Close(B);
    } else {  // rms family: the Adam direction, never written back into m or v
      float* m = s.states[0].Open(buf0);
      float* v = s.states[1].Open(buf1);
      kernels::RmsDirection(dir, m, v, g, n, adam);
      s.states[0].Close(m);
      s.states[1].Close(v);
    }

    kernels::PsiStats ps;
    Status st = kernels::Psi<float>(dir, s.t.rows, s.t.cols, p, popt, upd, &ps);
    if (!st.ok()) return st.WithPrefix("optimizer: Psi_p of " + s.t.name);
    residual = std::max(residual, ps.newton_residual);
    route = kernels::PsiMethodName(ps.used);
    const float scale = kernels::SpectralScale(lr, p, s.t.rows, s.t.cols);
    sq_spec += kernels::ApplySpectralUpdate(w, upd, n, scale, decay);
    n_spec += n;
  }
  if (stats) {
    stats->update_rms_spectral = n_spec ? std::sqrt(sq_spec / n_spec) : 0;
    stats->update_rms_adamw = n_adam ? std::sqrt(sq_adam / n_adam) : 0;
    stats->newton_residual = residual;
    stats->psi_route = route;
  }
  return Status::Ok();
}

size_t Optimizer::state_bytes() const {
  size_t b = 0;
  for (const auto& s : slots_)
    for (const auto& st : s->states) b += st.bytes();
  return b;
}

size_t Optimizer::state_bytes_fp32() const {
  size_t b = 0;
  for (const auto& s : slots_)
    for (const auto& st : s->states) b += st.bytes_fp32();
  return b;
}

int Optimizer::spectral_tensors() const {
  int k = 0;
  for (const auto& s : slots_) k += s->spectral;
  return k;
}

std::string Optimizer::Save() const {
  std::string out;
  for (const auto& s : slots_)
    for (const auto& st : s->states) st.Save(&out);
  return out;
}

Status Optimizer::Load(const std::string& blob) {
  size_t pos = 0;
  for (auto& s : slots_) {
    for (auto& st : s->states) {
      if (!st.Load(blob, &pos)) {
        return DataLoss("optimizer state is shorter than this optimizer's layout (at tensor " +
                        s->t.name + "): the checkpoint was written with another optimizer config");
      }
    }
  }
  if (pos != blob.size()) {
    return DataLoss("optimizer state is longer than this optimizer's layout: the checkpoint was "
                    "written with another optimizer config");
  }
  return Status::Ok();
}

}  // namespace ablate::trainer
