// DeviceOptimizer (device_optimizer.h): the CPU's trainer::Optimizer on the GPU.
//
// Elementwise work runs over "chunks": kQuantBlockSize (2048) consecutive values of one tensor,
// starting at a multiple of 2048 from the tensor's first value, so that a chunk is exactly one
// quantization block of kernels/quant and one CUDA block (256 threads x 8 values) owns it. The
// formulas are written as on the CPU, operation for operation; this file is compiled with
// --fmad=false so that nvcc contracts nothing into FMAs, and the AdamW, direction and apply kernels
// round exactly as the CPU does.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "quant/quant_cpu.h"
#include "trainer/optim/cuda/cuda_util.cuh"
#include "trainer/optim/cuda/device_optimizer.h"
#include "trainer/optim/cuda/spectral_cuda.h"

namespace ablate::trainer::cuda {
namespace {

constexpr int kChunk = int(kernels::kQuantBlockSize);  // 2048
constexpr int kPerThread = kChunk / kThreads;          // 8
static_assert(kChunk % kThreads == 0, "a chunk must split evenly over the block");

// Code tables of kernels/quant, uploaded once: the decoded values of the signed code in use
// (linear or dynamic) and of the unsigned dynamic code (v), and the dynamic codes' midpoints
// (QuantizeNormalized's binary search), padded with +inf.
struct QuantTables {
  float signed_table[256];
  float unsigned_table[256];
  float signed_th[128];
  float unsigned_th[256];
  int signed_dynamic;  // 1: the signed states use the dynamic code, 0: linear
};

struct DevSlot {
  int64_t w_off = 0;  // into weights / grads
  int64_t n = 0;
  int64_t dir_off = 0;     // spectral: into the direction / update batches
  int64_t st[2] = {0, 0};  // byte offsets into the state arena (fp32 values, or 8-bit codes)
  int64_t sc[2] = {0, 0};  // 8-bit: byte offsets of the block scales
  double lr = 0;           // before the schedule
  double p0_factor = 1;    // sqrt(max(1, rows / cols))
  int matrix = 0;
  int q8 = 0;
};

struct DevChunk {
  int slot;
  int64_t start;  // first value, inside the tensor
};

// Per-step scalars, computed on the host exactly as the CPU computes them.
struct StepScalars {
  float b1, b2, omb1, omb2, eps, ib1, ib2;
  float mu, gain;
  int nesterov;
  double lr_scale, wd;
  int p_zero;
  int want_sq;
};

// ---- device pieces ---------------------------------------------------------------------------

struct SharedTables {
  float st[256], ut[256], sth[128], uth[256];
};

__device__ void LoadTables(const QuantTables* q, SharedTables* s) {
  for (int i = threadIdx.x; i < 256; i += blockDim.x) {
    s->st[i] = q->signed_table[i];
    s->ut[i] = q->unsigned_table[i];
    s->uth[i] = q->unsigned_th[i];
    if (i < 128) s->sth[i] = q->signed_th[i];
  }
}

// kernels::QuantizeNormalized for one value t = x / absmax.
__device__ uint8_t QuantizeNormalized(float t, bool dynamic, bool is_signed, const float* th) {
  t = fminf(fmaxf(t, -1.0f), 1.0f);
  if (!is_signed && !(t > 0.0f)) return 0;
  if (!dynamic) {
    if (is_signed) return uint8_t(int8_t(int(rintf(127.0f * t))));
    return uint8_t(int(rintf(255.0f * t)));
  }
  const float a = fabsf(t);
  uint32_t u = 0;
  for (uint32_t step = is_signed ? 64u : 128u; step > 0; step >>= 1)
    u += th[u + step - 1] < a ? step : 0;
  if (is_signed && t < 0.0f && u != 0) u |= 0x80;
  return uint8_t(u);
}

// Max over the block (every thread gets it) and whether every value was finite.
__device__ float BlockAbsMax(float v, bool* all_finite, bool finite) {
  __shared__ float warp_max[kThreads / 32];
  __shared__ float result;
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = v;
  const int ok = __syncthreads_and(finite ? 1 : 0);
  if (threadIdx.x < 32) {
    float w = threadIdx.x < kThreads / 32 ? warp_max[threadIdx.x] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) w = fmaxf(w, __shfl_xor_sync(0xffffffffu, w, o));
    if (threadIdx.x == 0) result = w;
  }
  __syncthreads();
  *all_finite = ok != 0;
  float r = result;
  __syncthreads();  // `result` and `warp_max` may be reused by the next call
  return r;
}

// QuantizeBlockwise of one chunk held in registers (x[j] is value threadIdx.x + j * kThreads).
__device__ void StoreQuantized(const float (&x)[kPerThread], int len, bool dynamic, bool is_signed,
                               const float* th, uint8_t* codes, float* scale) {
  float amax = 0.0f;
  bool finite = true;
  for (int j = 0; j < kPerThread; ++j) {
    const int i = threadIdx.x + j * kThreads;
    if (i < len) {
      const float a = fabsf(x[j]);
      finite = finite && isfinite(a);
      amax = fmaxf(amax, a);
    }
  }
  bool all_finite = true;
  amax = BlockAbsMax(amax, &all_finite, finite);
  if (!all_finite || amax == 0.0f) {
    if (threadIdx.x == 0) *scale = all_finite ? 0.0f : __int_as_float(0x7fc00000);
    for (int j = 0; j < kPerThread; ++j) {
      const int i = threadIdx.x + j * kThreads;
      if (i < len) codes[i] = 0;
    }
    return;
  }
  if (threadIdx.x == 0) *scale = amax;
  for (int j = 0; j < kPerThread; ++j) {
    const int i = threadIdx.x + j * kThreads;
    if (i < len) codes[i] = QuantizeNormalized(x[j] / amax, dynamic, is_signed, th);
  }
}

// One state of one chunk into registers: fp32, or 8-bit decoded with `table`.
__device__ void LoadState(const DevSlot& s, int k, int64_t lo, int len, uint8_t* arena,
                          const float* table, float (&x)[kPerThread]) {
  if (s.q8) {
    const uint8_t* codes = arena + s.st[k] + lo;
    const float scale = reinterpret_cast<const float*>(arena + s.sc[k])[lo / kChunk];
    for (int j = 0; j < kPerThread; ++j) {
      const int i = threadIdx.x + j * kThreads;
      x[j] = i < len ? table[codes[i]] * scale : 0.0f;
    }
  } else {
    const float* f = reinterpret_cast<const float*>(arena + s.st[k]) + lo;
    for (int j = 0; j < kPerThread; ++j) {
      const int i = threadIdx.x + j * kThreads;
      x[j] = i < len ? f[i] : 0.0f;
    }
  }
}

__device__ void StoreState(const DevSlot& s, int k, int64_t lo, int len, uint8_t* arena,
                           bool dynamic, bool is_signed, const float* th,
                           const float (&x)[kPerThread]) {
  if (s.q8) {
    StoreQuantized(x, len, dynamic, is_signed, th, arena + s.st[k] + lo,
                   reinterpret_cast<float*>(arena + s.sc[k]) + lo / kChunk);
  } else {
    float* f = reinterpret_cast<float*>(arena + s.st[k]) + lo;
    for (int j = 0; j < kPerThread; ++j) {
      const int i = threadIdx.x + j * kThreads;
      if (i < len) f[i] = x[j];
    }
  }
}

// The schedule's learning rate of a slot, as the CPU rounds it.
__device__ float SlotLr(const DevSlot& s, const StepScalars& c) { return float(s.lr * c.lr_scale); }
__device__ float SlotDecay(const DevSlot& s, const StepScalars& c, float lr) {
  return (s.matrix && c.wd > 0) ? float(1.0 - lr * c.wd) : 1.0f;
}

enum Mode { kAdamW = 0, kRmsDirection = 1, kMomentumDirection = 2 };

// w[at] <- w[at] * decay - u (and its bf16 mirror, when kept), adding u^2 to the update's squared
// norm: the one weight write of the AdamW step and the spectral apply.
__device__ __forceinline__ void StepWeight(float* w, __nv_bfloat16* wb, int64_t at, float decay,
                                           float u, double& sq) {
  const float nw = w[at] * decay - u;
  w[at] = nw;
  if (wb != nullptr) wb[at] = __float2bfloat16_rn(nw);
  sq += double(u) * u;
}

// kAdamW: the AdamW group's full update. kRmsDirection / kMomentumDirection: the spectral group's
// state update and direction, written to dir. One block per chunk.
template <int kMode>
__global__ void __launch_bounds__(kThreads)
    StateKernel(const DevChunk* __restrict__ chunks, const DevSlot* __restrict__ slots,
                float* __restrict__ w, const float* __restrict__ g, uint8_t* __restrict__ arena,
                float* __restrict__ dir, const QuantTables* __restrict__ qt, StepScalars c,
                double* __restrict__ sq_parts, __nv_bfloat16* __restrict__ wb) {
  __shared__ SharedTables tables;
  const DevChunk ch = chunks[blockIdx.x];
  const DevSlot s = slots[ch.slot];
  const int64_t lo = ch.start;
  const int len = s.n - lo < kChunk ? int(s.n - lo) : kChunk;
  const bool dyn = qt->signed_dynamic != 0;
  if (s.q8) {
    LoadTables(qt, &tables);
    __syncthreads();
  }
  const float* gp = g + s.w_off + lo;
  float gv[kPerThread];
  for (int j = 0; j < kPerThread; ++j) {
    const int i = threadIdx.x + j * kThreads;
    gv[j] = i < len ? gp[i] : 0.0f;
  }
  float m[kPerThread];
  LoadState(s, 0, lo, len, arena, tables.st, m);

  if (kMode == kMomentumDirection) {
    float* d = dir + s.dir_off + lo;
    for (int j = 0; j < kPerThread; ++j) {
      m[j] = c.mu * m[j] + c.gain * gv[j];
      const int i = threadIdx.x + j * kThreads;
      if (i < len) d[i] = c.nesterov ? c.gain * gv[j] + c.mu * m[j] : m[j];
    }
    StoreState(s, 0, lo, len, arena, dyn, true, tables.sth, m);
    return;
  }

  float v[kPerThread];
  LoadState(s, 1, lo, len, arena, tables.ut, v);
  for (int j = 0; j < kPerThread; ++j) {
    m[j] = c.b1 * m[j] + c.omb1 * gv[j];
    v[j] = c.b2 * v[j] + c.omb2 * gv[j] * gv[j];
  }
  if (kMode == kRmsDirection) {
    float* d = dir + s.dir_off + lo;
    for (int j = 0; j < kPerThread; ++j) {
      const int i = threadIdx.x + j * kThreads;
      if (i < len) d[i] = (m[j] * c.ib1) / (sqrtf(v[j] * c.ib2) + c.eps);
    }
  } else {
    const float lr = SlotLr(s, c);
    const float decay = SlotDecay(s, c, lr);
    double sq = 0;
    for (int j = 0; j < kPerThread; ++j) {
      const int i = threadIdx.x + j * kThreads;
      if (i < len) {
        StepWeight(w, wb, s.w_off + lo + i, decay,
                   lr * (m[j] * c.ib1) / (sqrtf(v[j] * c.ib2) + c.eps), sq);
      }
    }
    if (c.want_sq) {
      sq = BlockSumDouble(sq);
      if (threadIdx.x == 0) sq_parts[blockIdx.x] = sq;
      __syncthreads();
    }
  }
  StoreState(s, 0, lo, len, arena, dyn, true, tables.sth, m);
  StoreState(s, 1, lo, len, arena, true, false, tables.uth, v);
}

// The spectral group's W <- W * decay - scale * Psi_p(U). One block per chunk.
__global__ void __launch_bounds__(kThreads)
    ApplyKernel(const DevChunk* __restrict__ chunks, const DevSlot* __restrict__ slots,
                float* __restrict__ w, const float* __restrict__ upd, StepScalars c,
                double* __restrict__ sq_parts, __nv_bfloat16* __restrict__ wb) {
  const DevChunk ch = chunks[blockIdx.x];
  const DevSlot s = slots[ch.slot];
  const int64_t lo = ch.start;
  const int len = s.n - lo < kChunk ? int(s.n - lo) : kChunk;
  const float lr = SlotLr(s, c);
  const float decay = SlotDecay(s, c, lr);
  const float scale = c.p_zero ? float(lr * s.p0_factor) : lr;
  const float* up = upd + s.dir_off + lo;
  double sq = 0;
  for (int j = 0; j < kPerThread; ++j) {
    const int i = threadIdx.x + j * kThreads;
    if (i < len) {
      StepWeight(w, wb, s.w_off + lo + i, decay, scale * up[i], sq);
    }
  }
  if (c.want_sq) {
    sq = BlockSumDouble(sq);
    if (threadIdx.x == 0) sq_parts[blockIdx.x] = sq;
  }
}

// out[0] = sum a, out[1] = sum b (one block, fixed order).
__global__ void SumParts(const double* a, int na, const double* b, int nb, double* out) {
  double s = 0;
  for (int i = threadIdx.x; i < na; i += blockDim.x) s += a[i];
  s = BlockSumDouble(s);
  if (threadIdx.x == 0) out[0] = s;
  __syncthreads();
  s = 0;
  for (int i = threadIdx.x; i < nb; i += blockDim.x) s += b[i];
  s = BlockSumDouble(s);
  if (threadIdx.x == 0) out[1] = s;
}

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
    for (int64_t lo = 0; lo < d.slots[i].n; lo += kChunk) list.push_back({int(i), lo});
  }
  d.n_adam_chunks = int(adam_chunks.size());
  d.n_spec_chunks = int(spec_chunks.size());

  QuantTables tables{};
  const auto scheme =
      cfg.state_quant == "linear" ? kernels::QuantScheme::kLinear : kernels::QuantScheme::kDynamic;
  const auto& st = kernels::QuantCodeTable(scheme, true);
  const auto& ut = kernels::QuantCodeTable(kernels::QuantScheme::kDynamic, false);
  const auto& sdyn = kernels::QuantCodeTable(kernels::QuantScheme::kDynamic, true);
  std::copy(st.begin(), st.end(), tables.signed_table);
  std::copy(ut.begin(), ut.end(), tables.unsigned_table);
  // Midpoints of the sorted magnitudes, as kernels/quant builds them (signed: codes 0..127 are the
  // non-negative magnitudes).
  for (int i = 0; i < 127; ++i)
    tables.signed_th[i] = float(0.5 * (double(sdyn[size_t(i)]) + double(sdyn[size_t(i) + 1])));
  tables.signed_th[127] = INFINITY;
  for (int i = 0; i < 255; ++i)
    tables.unsigned_th[i] = float(0.5 * (double(ut[size_t(i)]) + double(ut[size_t(i) + 1])));
  tables.unsigned_th[255] = INFINITY;
  tables.signed_dynamic = scheme == kernels::QuantScheme::kDynamic ? 1 : 0;

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
    auto m = ResolvePsiMethod(p, popt);
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

  StepScalars sc{};
  const double bc1 = 1.0 - std::pow(c.beta1, double(step));
  const double bc2 = 1.0 - std::pow(c.beta2, double(step));
  sc.b1 = float(c.beta1);
  sc.b2 = float(c.beta2);
  sc.omb1 = 1 - sc.b1;
  sc.omb2 = 1 - sc.b2;
  sc.eps = float(c.eps);
  sc.ib1 = float(1.0 / bc1);
  sc.ib2 = float(1.0 / bc2);
  sc.mu = float(c.momentum);
  sc.gain = c.momentum_kind == "ema" ? 1 - sc.mu : 1.0f;
  sc.nesterov = c.nesterov ? 1 : 0;
  sc.lr_scale = lr_scale;
  sc.wd = c.weight_decay;
  sc.p_zero = p == 0 ? 1 : 0;
  sc.want_sq = stats ? 1 : 0;

  if (d.n_adam_chunks > 0) {
    StateKernel<kAdamW>
        <<<d.n_adam_chunks, kThreads, 0, d.stream>>>(d.d_adam_chunks, d.d_slots, d_weights, d_grads,
                                                     d.arena, nullptr, d.d_tables, sc, d.d_adam_sq,
                                                     d.mirror);
  }
  bool gemms = false;
  if (d.psi) {
    const bool momentum_family = c.kind == "spectral" && c.family == "momentum";
    if (momentum_family) {
      StateKernel<kMomentumDirection><<<d.n_spec_chunks, kThreads, 0, d.stream>>>(
          d.d_spec_chunks, d.d_slots, d_weights, d_grads, d.arena, d.d_dir, d.d_tables, sc,
          nullptr, nullptr);
    } else {
      StateKernel<kRmsDirection><<<d.n_spec_chunks, kThreads, 0, d.stream>>>(
          d.d_spec_chunks, d.d_slots, d_weights, d_grads, d.arena, d.d_dir, d.d_tables, sc,
          nullptr, nullptr);
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
    ApplyKernel<<<d.n_spec_chunks, kThreads, 0, d.stream>>>(d.d_spec_chunks, d.d_slots, d_weights,
                                                            src, sc, d.d_spec_sq, d.mirror);
  }
  ABLATE_RETURN_IF_ERROR(CudaStatus(cudaGetLastError(), "optimizer (cuda): kernel launch"));
  if (!stats) return Status::Ok();

  SumParts<<<1, kThreads, 0, d.stream>>>(d.d_adam_sq, d.n_adam_chunks, d.d_spec_sq, d.n_spec_chunks,
                                         d.d_sums);
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
