// DeviceOptimizer (device_optimizer.h): the CPU's trainer::Optimizer on the GPU, host side. The
// groups, learning rates and states are decided here exactly as trainer::Optimizer::Create decides
// them; every elementwise step runs in the update kernels of kernels/optim/cuda (chunks of
// kOptimChunk values, fp32 or 8-bit state in one arena), Psi_p in kernels/spectral/cuda's
// BatchedPsi. Host code only: nothing here is compiled by nvcc.
#include "trainer/cuda/device_optimizer.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "ablate/cuda_status.h"
#include "optim/cuda/optim_cuda.h"
#include "optim/optim_cpu.h"
#include "quant/cuda/quant_cuda.h"
#include "quant/quant_cpu.h"
#include "spectral/cuda/spectral_cuda.h"

namespace ablate::trainer::cuda {
namespace {

using kernels::cuda::BatchedPsi;
using kernels::cuda::DevChunk;
using kernels::cuda::DevSlot;
using kernels::cuda::PsiGroup;
using kernels::cuda::QuantTables;
using kernels::cuda::StepScalars;

kernels::PsiMethod ParseMethod(const std::string& m) {
  if (m == "newton_schulz") return kernels::PsiMethod::kNewtonSchulz;
  if (m == "coupled_newton") return kernels::PsiMethod::kCoupledNewton;
  if (m == "eigh") return kernels::PsiMethod::kEigh;
  return kernels::PsiMethod::kAuto;
}

size_t AlignUp(size_t x) { return (x + 255) & ~size_t(255); }

}  // namespace

struct HostState {  // one state tensor's place in the arena
  int64_t n = 0;
  bool q8 = false;
  size_t off = 0;        // fp32 values or codes
  size_t scale_off = 0;  // q8: block scales
  size_t bytes() const {
    return q8 ? size_t(n) + sizeof(float) * size_t(kernels::NumQuantBlocks(n))
              : size_t(n) * sizeof(float);
  }
};

struct HostSlot {
  ParamTensor t;
  int64_t n = 0;
  bool spectral = false, matrix = false;
  std::vector<HostState> states;
};

struct DeviceOptimizer::Impl {
  config::OptimizerSection cfg;
  cudaStream_t stream = nullptr;
  std::vector<HostSlot> slots;
  size_t num_params = 0;
  int64_t spectral_values = 0, adam_values = 0;

  std::vector<void*> allocations;
  size_t workspace_bytes = 0;
  size_t arena_bytes = 0;
  uint8_t* arena = nullptr;
  DevSlot* d_slots = nullptr;
  DevChunk* d_adam_chunks = nullptr;
  DevChunk* d_spec_chunks = nullptr;
  int n_adam_chunks = 0, n_spec_chunks = 0;
  QuantTables* d_tables = nullptr;
  double* d_adam_sq = nullptr;
  double* d_spec_sq = nullptr;
  double* d_sums = nullptr;
  float* d_dir = nullptr;
  float* d_upd = nullptr;
  std::vector<int64_t> group_base;  // per spectral shape group: first value in dir / upd
  std::unique_ptr<BatchedPsi> psi;
  __nv_bfloat16* mirror = nullptr;  // SetBf16Mirror's buffer, or null

  ~Impl() {
    psi.reset();
    for (void* p : allocations) cudaFree(p);
  }

  Status Alloc(void** p, size_t bytes, const char* what, bool count_as_workspace) {
    ABLATE_RETURN_IF_ERROR(DeviceAlloc(p, bytes, what));
    if (*p) allocations.push_back(*p);
    if (count_as_workspace) workspace_bytes += bytes;
    return Status::Ok();
  }
};

DeviceOptimizer::DeviceOptimizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DeviceOptimizer::~DeviceOptimizer() = default;

StatusOr<std::unique_ptr<DeviceOptimizer>> DeviceOptimizer::Create(
    const config::OptimizerSection& cfg, const std::vector<ParamTensor>& params, size_t num_params,
    cudaStream_t stream) {
  if (cfg.state_bits != 8 && cfg.state_bits != 32)
    return InvalidArgument("optimizer (cuda): state_bits must be 8 or 32, got " +
                           std::to_string(cfg.state_bits));
  auto impl = std::make_unique<Impl>();
  Impl& d = *impl;
  d.cfg = cfg;
  d.stream = stream;
  d.num_params = num_params;
  const bool spectral_kind = cfg.kind == "spectral";
  const bool momentum = spectral_kind && cfg.family == "momentum";

  // Groups, learning rates and states exactly as trainer::Optimizer::Create decides them.
  struct ShapeGroup {
    int m, n;
    std::vector<int> slots;
  };
  std::vector<ShapeGroup> shapes;
  std::vector<DevSlot> dslots;
  size_t arena = 0;
  for (const auto& t : params) {
    HostSlot hs;
    hs.t = t;
    hs.n = int64_t(t.rows) * t.cols;
    if (t.rows < 1 || t.cols < 1)
      return InvalidArgument("optimizer (cuda): tensor " + t.name + " has an empty shape");
    if (t.offset + size_t(hs.n) > num_params)
      return Internal("optimizer: tensor " + t.name + " lies outside the parameter buffer");
    hs.matrix = t.role != ParamRole::kVector && t.rows > 1 && t.cols > 1;
    const bool embedding_like = t.role == ParamRole::kEmbedding || t.role == ParamRole::kHead;
    hs.spectral = spectral_kind && hs.matrix && (!embedding_like || cfg.spectral_embeddings);
    DevSlot ds;
    ds.w_off = int64_t(t.offset);
    ds.n = hs.n;
    ds.lr = hs.spectral ? cfg.lr
                        : (spectral_kind ? cfg.lr_vector : (hs.matrix ? cfg.lr : cfg.lr_vector));
    ds.p0_factor = std::sqrt(std::max(1.0, double(t.rows) / t.cols));
    ds.matrix = hs.matrix;
    const bool q8 = cfg.state_bits == 8 && hs.matrix;
    ds.q8 = q8;
    const int nstates = hs.spectral && momentum ? 1 : 2;
    for (int k = 0; k < nstates; ++k) {
      HostState st;
      st.n = hs.n;
      st.q8 = q8;
      st.off = arena;
      arena = AlignUp(arena + (q8 ? size_t(hs.n) : size_t(hs.n) * sizeof(float)));
      if (q8) {
        st.scale_off = arena;
        arena = AlignUp(arena + sizeof(float) * size_t(kernels::NumQuantBlocks(hs.n)));
      }
      ds.st[k] = int64_t(st.off);
      ds.sc[k] = int64_t(st.scale_off);
      hs.states.push_back(st);
    }
    if (hs.spectral) {
      auto it = std::find_if(shapes.begin(), shapes.end(),
                             [&](const ShapeGroup& s) { return s.m == t.rows && s.n == t.cols; });
      if (it == shapes.end()) {
        shapes.push_back({t.rows, t.cols, {}});
        it = shapes.end() - 1;
      }
      it->slots.push_back(int(d.slots.size()));
      d.spectral_values += hs.n;
    } else {
      d.adam_values += hs.n;
    }
    d.slots.push_back(std::move(hs));
    dslots.push_back(ds);
  }
  d.arena_bytes = std::max<size_t>(arena, 256);

  // Direction / update batches: shape group after shape group, slots in parameter order.
  std::vector<PsiGroup> psi_groups;
  int64_t base = 0;
  for (const auto& sg : shapes) {
    d.group_base.push_back(base);
    for (int si : sg.slots) {
      dslots[size_t(si)].dir_off = base;
      base += int64_t(sg.m) * sg.n;
    }
    psi_groups.push_back({sg.m, sg.n, int(sg.slots.size())});
  }

  std::vector<DevChunk> adam_chunks, spec_chunks;
  for (size_t i = 0; i < d.slots.size(); ++i) {
    auto& list = d.slots[i].spectral ? spec_chunks : adam_chunks;
    for (int64_t lo = 0; lo < d.slots[i].n; lo += kernels::cuda::kOptimChunk)
      list.push_back({int(i), lo});
  }
  d.n_adam_chunks = int(adam_chunks.size());
  d.n_spec_chunks = int(spec_chunks.size());

  const auto scheme =
      cfg.state_quant == "linear" ? kernels::QuantScheme::kLinear : kernels::QuantScheme::kDynamic;
  const auto v_scheme = cfg.state_quant_v == "linear" ? kernels::QuantScheme::kLinear
                                                      : kernels::QuantScheme::kDynamic;
  const QuantTables tables = kernels::cuda::MakeQuantTables(scheme, v_scheme);

  ABLATE_RETURN_IF_ERROR(
      d.Alloc(reinterpret_cast<void**>(&d.arena), d.arena_bytes, "optimizer (cuda): state", false));
  ABLATE_RETURN_IF_ERROR(d.Alloc(reinterpret_cast<void**>(&d.d_slots),
                                 sizeof(DevSlot) * std::max<size_t>(1, dslots.size()),
                                 "optimizer (cuda): slot table", true));
  ABLATE_RETURN_IF_ERROR(d.Alloc(reinterpret_cast<void**>(&d.d_adam_chunks),
                                 sizeof(DevChunk) * std::max<size_t>(1, adam_chunks.size()),
                                 "optimizer (cuda): chunk table", true));
  ABLATE_RETURN_IF_ERROR(d.Alloc(reinterpret_cast<void**>(&d.d_spec_chunks),
                                 sizeof(DevChunk) * std::max<size_t>(1, spec_chunks.size()),
                                 "optimizer (cuda): chunk table", true));
  ABLATE_RETURN_IF_ERROR(d.Alloc(reinterpret_cast<void**>(&d.d_tables), sizeof(QuantTables),
                                 "optimizer (cuda): code tables", true));
  ABLATE_RETURN_IF_ERROR(d.Alloc(reinterpret_cast<void**>(&d.d_adam_sq),
                                 sizeof(double) * std::max<size_t>(1, adam_chunks.size()),
                                 "optimizer (cuda): sums", true));
  ABLATE_RETURN_IF_ERROR(d.Alloc(reinterpret_cast<void**>(&d.d_spec_sq),
                                 sizeof(double) * std::max<size_t>(1, spec_chunks.size()),
                                 "optimizer (cuda): sums", true));
  ABLATE_RETURN_IF_ERROR(d.Alloc(reinterpret_cast<void**>(&d.d_sums), sizeof(double) * 2,
                                 "optimizer (cuda): sums", true));
  if (d.spectral_values > 0) {
    ABLATE_RETURN_IF_ERROR(d.Alloc(reinterpret_cast<void**>(&d.d_dir),
                                   sizeof(float) * size_t(d.spectral_values),
                                   "optimizer (cuda): direction batch", true));
    ABLATE_RETURN_IF_ERROR(d.Alloc(reinterpret_cast<void**>(&d.d_upd),
                                   sizeof(float) * size_t(d.spectral_values),
                                   "optimizer (cuda): update batch", true));
    ABLATE_ASSIGN_OR_RETURN(d.psi, BatchedPsi::Create(psi_groups, stream, cfg.tf32));
    d.workspace_bytes += d.psi->workspace_bytes();
  }
  const char* what = "optimizer (cuda): upload";
  ABLATE_RETURN_IF_ERROR(CudaStatus(cudaMemsetAsync(d.arena, 0, d.arena_bytes, stream), what));
  if (!dslots.empty())
    ABLATE_RETURN_IF_ERROR(
        CudaStatus(cudaMemcpyAsync(d.d_slots, dslots.data(), sizeof(DevSlot) * dslots.size(),
                                   cudaMemcpyHostToDevice, stream),
                   what));
  if (!adam_chunks.empty())
    ABLATE_RETURN_IF_ERROR(CudaStatus(
        cudaMemcpyAsync(d.d_adam_chunks, adam_chunks.data(), sizeof(DevChunk) * adam_chunks.size(),
                        cudaMemcpyHostToDevice, stream),
        what));
  if (!spec_chunks.empty())
    ABLATE_RETURN_IF_ERROR(CudaStatus(
        cudaMemcpyAsync(d.d_spec_chunks, spec_chunks.data(), sizeof(DevChunk) * spec_chunks.size(),
                        cudaMemcpyHostToDevice, stream),
        what));
  ABLATE_RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(d.d_tables, &tables, sizeof(tables), cudaMemcpyHostToDevice, stream), what));
  // The host vectors above die with this function: wait for the copies.
  ABLATE_RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream), what));
  return std::unique_ptr<DeviceOptimizer>(new DeviceOptimizer(std::move(impl)));
}

Status DeviceOptimizer::Step(float* d_weights, const float* d_grads, int64_t step, double lr_scale,
                             double p, OptimizerStats* stats) {
  Impl& d = *impl_;
  const auto& c = d.cfg;
  if (!d_weights || !d_grads) return InvalidArgument("optimizer (cuda): null weights or grads");
  if (step < 1)
    return InvalidArgument("optimizer (cuda): step must be >= 1, got " + std::to_string(step));
  kernels::PsiOptions popt;
  popt.method = ParseMethod(c.psi_method);
  popt.ns_steps = c.ns_steps;
  popt.newton_iters = c.newton_iters;
  kernels::PsiMethod method = kernels::PsiMethod::kAuto;
  if (d.psi) {
    // Validated before anything is enqueued (the CPU fails inside its first spectral tensor).
    auto m = kernels::ResolvePsiMethod(p, popt);
    if (!m.ok()) {
      std::string name;
      for (const auto& s : d.slots)
        if (s.spectral) {
          name = s.t.name;
          break;
        }
      return m.status().WithPrefix("optimizer: Psi_p of " + name);
    }
    method = *m;
  }

  // The CPU's scalars (optim_cpu.h), so that both backends round them alike.
  const kernels::AdamScalars adam = kernels::MakeAdamScalars(c.beta1, c.beta2, c.eps, step);
  StepScalars sc{};
  sc.b1 = adam.b1;
  sc.b2 = adam.b2;
  sc.omb1 = 1 - sc.b1;
  sc.omb2 = 1 - sc.b2;
  sc.eps = adam.eps;
  sc.ib1 = adam.ib1;
  sc.ib2 = adam.ib2;
  sc.mu = float(c.momentum);
  sc.gain = c.momentum_kind == "ema" ? 1 - sc.mu : 1.0f;
  sc.nesterov = c.nesterov ? 1 : 0;
  sc.lr_scale = lr_scale;
  sc.wd = c.weight_decay;
  sc.p_zero = p == 0 ? 1 : 0;
  sc.want_sq = stats ? 1 : 0;

  const char* what = "optimizer (cuda)";
  ABLATE_RETURN_IF_ERROR(kernels::cuda::AdamWStepCuda(d.d_adam_chunks, d.n_adam_chunks, d.d_slots,
                                                      d_weights, d_grads, d.arena, d.d_tables, sc,
                                                      d.d_adam_sq, d.mirror, d.stream)
                             .WithPrefix(what));
  bool gemms = false;
  if (d.psi) {
    const bool momentum_family = c.kind == "spectral" && c.family == "momentum";
    if (momentum_family) {
      ABLATE_RETURN_IF_ERROR(kernels::cuda::MomentumDirectionCuda(
                                 d.d_spec_chunks, d.n_spec_chunks, d.d_slots, d_grads, d.arena,
                                 d.d_dir, d.d_tables, sc, d.stream)
                                 .WithPrefix(what));
    } else {
      ABLATE_RETURN_IF_ERROR(kernels::cuda::RmsDirectionCuda(d.d_spec_chunks, d.n_spec_chunks,
                                                             d.d_slots, d_grads, d.arena, d.d_dir,
                                                             d.d_tables, sc, d.stream)
                                 .WithPrefix(what));
    }
    const float* src = d.d_dir;  // identity: Psi_1(U) = U, read in place
    if (!(method == kernels::PsiMethod::kIdentity || p == 1.0)) {
      std::vector<float*> in, out;
      for (int64_t b : d.group_base) {
        in.push_back(d.d_dir + b);
        out.push_back(d.d_upd + b);
      }
      auto r = d.psi->Run(in, out, p, popt, stats != nullptr);
      if (!r.ok()) return r.status().WithPrefix("optimizer (cuda)");
      src = d.d_upd;
      gemms = true;
    }
    ABLATE_RETURN_IF_ERROR(kernels::cuda::SpectralApplyCuda(d.d_spec_chunks, d.n_spec_chunks,
                                                            d.d_slots, d_weights, src, sc,
                                                            d.d_spec_sq, d.mirror, d.stream)
                               .WithPrefix(what));
  }
  if (!stats) return Status::Ok();

  ABLATE_RETURN_IF_ERROR(kernels::cuda::SumUpdatePartsCuda(d.d_adam_sq, d.n_adam_chunks,
                                                           d.d_spec_sq, d.n_spec_chunks, d.d_sums,
                                                           d.stream)
                             .WithPrefix(what));
  double sums[2] = {0, 0};
  ABLATE_RETURN_IF_ERROR(
      CudaStatus(cudaMemcpyAsync(sums, d.d_sums, sizeof(sums), cudaMemcpyDeviceToHost, d.stream),
                 "optimizer (cuda): stats copy"));
  ABLATE_RETURN_IF_ERROR(
      CudaStatus(cudaStreamSynchronize(d.stream), "optimizer (cuda): cudaStreamSynchronize"));
  stats->update_rms_spectral = d.spectral_values ? std::sqrt(sums[1] / d.spectral_values) : 0;
  stats->update_rms_adamw = d.adam_values ? std::sqrt(sums[0] / d.adam_values) : 0;
  stats->newton_residual = 0;
  stats->psi_route.clear();
  if (d.psi) {
    if (gemms && method == kernels::PsiMethod::kCoupledNewton) {
      ABLATE_ASSIGN_OR_RETURN(stats->newton_residual, d.psi->ResidualMax());
    }
    if (gemms && method == kernels::PsiMethod::kEigh) {
      ABLATE_RETURN_IF_ERROR(d.psi->CheckEigh().WithPrefix("optimizer (cuda)"));
    }
    stats->psi_route = kernels::PsiMethodName(method);
    if (gemms && d.psi->tf32()) stats->psi_route += "+tf32";
  }
  return Status::Ok();
}

void DeviceOptimizer::SetBf16Mirror(void* d_mirror) {
  impl_->mirror = static_cast<__nv_bfloat16*>(d_mirror);
}

size_t DeviceOptimizer::state_bytes() const {
  size_t b = 0;
  for (const auto& s : impl_->slots)
    for (const auto& st : s.states) b += st.bytes();
  return b;
}

size_t DeviceOptimizer::state_bytes_fp32() const {
  size_t b = 0;
  for (const auto& s : impl_->slots)
    for (const auto& st : s.states) b += size_t(st.n) * sizeof(float);
  return b;
}

size_t DeviceOptimizer::workspace_bytes() const { return impl_->workspace_bytes; }

int DeviceOptimizer::spectral_tensors() const {
  int k = 0;
  for (const auto& s : impl_->slots) k += s.spectral;
  return k;
}

std::string DeviceOptimizer::Save() const {
  const Impl& d = *impl_;
  std::vector<uint8_t> host(d.arena_bytes);
  cudaError_t e = cudaStreamSynchronize(d.stream);
  if (e == cudaSuccess) e = cudaMemcpy(host.data(), d.arena, d.arena_bytes, cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) return std::string();  // Save has no error channel; Load rejects ""
  std::string out;
  for (const auto& s : d.slots) {
    for (const auto& st : s.states) {
      if (st.q8) {
        out.append(reinterpret_cast<const char*>(host.data() + st.off), size_t(st.n));
        out.append(reinterpret_cast<const char*>(host.data() + st.scale_off),
                   sizeof(float) * size_t(kernels::NumQuantBlocks(st.n)));
      } else {
        out.append(reinterpret_cast<const char*>(host.data() + st.off),
                   sizeof(float) * size_t(st.n));
      }
    }
  }
  return out;
}

Status DeviceOptimizer::Load(const std::string& blob) {
  Impl& d = *impl_;
  std::vector<uint8_t> host(d.arena_bytes, 0);
  size_t pos = 0;
  for (const auto& s : d.slots) {
    for (const auto& st : s.states) {
      const size_t need = st.bytes();
      if (blob.size() - pos < need) {
        return DataLoss("optimizer state is shorter than this optimizer's layout (at tensor " +
                        s.t.name + "): the checkpoint was written with another optimizer config");
      }
      const char* p = blob.data() + pos;
      if (st.q8) {
        std::memcpy(host.data() + st.off, p, size_t(st.n));
        std::memcpy(host.data() + st.scale_off, p + st.n, need - size_t(st.n));
      } else {
        std::memcpy(host.data() + st.off, p, need);
      }
      pos += need;
    }
  }
  if (pos != blob.size()) {
    return DataLoss(
        "optimizer state is longer than this optimizer's layout: the checkpoint was "
        "written with another optimizer config");
  }
  ABLATE_RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(d.arena, host.data(), d.arena_bytes, cudaMemcpyHostToDevice, d.stream),
      "optimizer (cuda): state upload"));
  return CudaStatus(cudaStreamSynchronize(d.stream), "optimizer (cuda): state upload");
}

}  // namespace ablate::trainer::cuda
