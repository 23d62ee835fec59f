// The device optimizer (worker/trainer/cuda/device_optimizer.h, over the kernels of
// kernels/optim/cuda and kernels/spectral/cuda) against its CPU twin trainer::Optimizer and the
// float64 Psi_p of kernels/spectral. Needs a GPU; every test skips (GTEST_SKIP) without one.
//
// Layout: the small GPT of optim_test_util.h (vocab 300, d 64, 2 layers, QK-norm): square (64, 64),
// tall (256, 64) and wide (64, 256) hidden matrices, a (300, 64) embedding, vectors; no tensor is
// a multiple of the 2048-value chunk, offsets are unaligned. Same weights, same gradients on both
// backends, step after step.
//
// What is checked (tolerances in the tests; the measured values are printed):
//   - AdamW, fp32 and 8-bit (dynamic, linear) state: weights after every step within 1e-6 of the
//     CPU (the kernels are written to round like the CPU: the mismatch count is printed), the
//     Save() blobs, state bytes, update RMS.
//   - spectral rms and momentum, p in {0, 0.25, 0.5, 1}, TF32 off and on: the applied update of
//     every spectral tensor against the CPU's float update and against a float64 update
//     (Psi<double> of the CPU's direction), rel. L2 and cosine.
//   - a checkpoint saved on one backend continues on the other as on the first.
//   - zero gradients stay finite on every route; bad p and bad blobs are errors.
// BatchedPsi alone (every route against Psi<double>): tests/gpu/kernels/spectral/spectral_gpu_test.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "ablate/bf16.h"
#include "optim_test_util.h"
#include "spectral/spectral_cpu.h"
#include "trainer/cuda/device_optimizer.h"
#include "trainer/optim/optimizer.h"

namespace ablate::trainer::cuda {
namespace {

using testing::Compare;
using testing::DeviceFloats;
using testing::ErrStats;
using testing::HaveGpu;
using testing::RandomNormal;

#define SKIP_WITHOUT_GPU() \
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device"

struct Layout {
  std::vector<ParamTensor> params;
  size_t n = 0;
};

Layout SmallLayout() {
  auto g = Gpt<float>::Create(testing::SmallGpt());
  EXPECT_TRUE(g.ok());
  return {g->params(), g->num_params()};
}

// One optimizer per backend over the same weights.
struct Twin {
  config::OptimizerSection cfg;
  Layout layout;
  std::unique_ptr<Optimizer> cpu;
  std::unique_ptr<DeviceOptimizer> gpu;
  std::vector<float> w_cpu;
  std::unique_ptr<DeviceFloats> w_gpu, g_gpu;

  static std::unique_ptr<Twin> Make(const config::OptimizerSection& cfg, const Layout& layout,
                                    uint64_t seed) {
    auto t = std::make_unique<Twin>();
    t->cfg = cfg;
    t->layout = layout;
    auto c = Optimizer::Create(cfg, layout.params, layout.n);
    auto g = DeviceOptimizer::Create(cfg, layout.params, layout.n, nullptr);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_TRUE(g.ok()) << g.status().ToString();
    if (!c.ok() || !g.ok()) return nullptr;
    t->cpu = std::move(*c);
    t->gpu = std::move(*g);
    t->w_cpu = RandomNormal(layout.n, seed, 0.02f);
    t->w_gpu = std::make_unique<DeviceFloats>(t->w_cpu);
    t->g_gpu = std::make_unique<DeviceFloats>(layout.n);
    return t;
  }

  void Step(const std::vector<float>& g, int64_t step, double lr_scale, double p,
            OptimizerStats* sc = nullptr, OptimizerStats* sg = nullptr) {
    Status a = cpu->Step(w_cpu.data(), g.data(), step, lr_scale, p, sc);
    ASSERT_TRUE(a.ok()) << a.ToString();
    g_gpu->Upload(g);
    Status b = gpu->Step(w_gpu->get(), g_gpu->get(), step, lr_scale, p, sg);
    ASSERT_TRUE(b.ok()) << b.ToString();
  }
  std::vector<float> GpuWeights() const { return w_gpu->Download(); }
};

struct Diff {
  double max_abs = 0;
  size_t mismatches = 0;
};

Diff Differ(const std::vector<float>& a, const std::vector<float>& b) {
  Diff d;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) ++d.mismatches;
    d.max_abs = std::max(d.max_abs, std::fabs(double(a[i]) - double(b[i])));
  }
  return d;
}

bool AllFinite(const std::vector<float>& x) {
  return std::all_of(x.begin(), x.end(), [](float v) { return std::isfinite(v); });
}

// ---- AdamW ---------------------------------------------------------------------------------

// SetBf16Mirror: the update kernels also write bf16(w) of every tensor (AdamW and spectral
// groups), exactly the rounded fp32 result, and the fp32 weights stay bit-identical to a run
// without the mirror.
TEST(DeviceOptimizerTest, Bf16MirrorIsRoundedWeights) {
  SKIP_WITHOUT_GPU();
  const Layout layout = SmallLayout();
  struct Case {
    const char* kind;
    int bits;
    double p;
  };
  for (const Case& k : {Case{"adamw", 32, 1.0}, Case{"adamw", 8, 1.0}, Case{"spectral", 32, 0.5},
                        Case{"spectral", 32, 0.0}}) {
    config::OptimizerSection c;
    c.kind = k.kind;
    c.state_bits = k.bits;
    c.lr = 1e-2;
    c.lr_vector = 3e-3;
    c.weight_decay = 0.1;
    auto plain = DeviceOptimizer::Create(c, layout.params, layout.n, nullptr);
    auto mirrored = DeviceOptimizer::Create(c, layout.params, layout.n, nullptr);
    ASSERT_TRUE(plain.ok() && mirrored.ok());
    const std::vector<float> w0 = RandomNormal(layout.n, 21, 0.02f);
    DeviceFloats wa(w0), wb(w0), g(layout.n);
    uint16_t* mirror = nullptr;
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&mirror), layout.n * sizeof(uint16_t)),
              cudaSuccess);
    ASSERT_EQ(cudaMemset(mirror, 0xff, layout.n * sizeof(uint16_t)), cudaSuccess);
    (*mirrored)->SetBf16Mirror(mirror);
    for (int64_t step = 1; step <= 3; ++step) {
      g.Upload(RandomNormal(layout.n, 100 + uint64_t(step), 0.1f));
      ASSERT_TRUE((*plain)->Step(wa.get(), g.get(), step, 1.0, k.p, nullptr).ok());
      ASSERT_TRUE((*mirrored)->Step(wb.get(), g.get(), step, 1.0, k.p, nullptr).ok());
    }
    const auto a = wa.Download(), b = wb.Download();
    EXPECT_EQ(Differ(a, b).mismatches, 0u) << k.kind << " bits " << k.bits;
    std::vector<uint16_t> m(layout.n);
    ASSERT_EQ(cudaMemcpy(m.data(), mirror, m.size() * sizeof(uint16_t), cudaMemcpyDeviceToHost),
              cudaSuccess);
    size_t bad = 0, covered = 0;
    for (const auto& t : layout.params) {
      for (size_t i = t.offset; i < t.offset + t.numel(); ++i, ++covered) {
        if (m[i] != Bf16Bits(b[i])) ++bad;
      }
    }
    EXPECT_EQ(bad, 0u) << k.kind << " bits " << k.bits << " p " << k.p;
    EXPECT_GT(covered, 0u);
    // Turned off again: the mirror is left alone.
    (*mirrored)->SetBf16Mirror(nullptr);
    ASSERT_EQ(cudaMemset(mirror, 0, layout.n * sizeof(uint16_t)), cudaSuccess);
    ASSERT_TRUE((*mirrored)->Step(wb.get(), g.get(), 4, 1.0, k.p, nullptr).ok());
    ASSERT_EQ(cudaMemcpy(m.data(), mirror, m.size() * sizeof(uint16_t), cudaMemcpyDeviceToHost),
              cudaSuccess);
    EXPECT_TRUE(std::all_of(m.begin(), m.end(), [](uint16_t x) { return x == 0; }));
    cudaFree(mirror);
  }
}

TEST(DeviceOptimizerTest, AdamWMatchesCpu) {
  SKIP_WITHOUT_GPU();
  const Layout layout = SmallLayout();
  struct Case {
    int bits;
    const char* quant;
    const char* quant_v = "dynamic";
  };
  for (const Case& k :
       {Case{32, "dynamic"}, Case{8, "dynamic"}, Case{8, "linear"}, Case{8, "linear", "linear"}}) {
    config::OptimizerSection c;
    c.kind = "adamw";
    c.lr = 1e-2;
    c.lr_vector = 3e-3;
    c.weight_decay = 0.1;
    c.state_bits = k.bits;
    c.state_quant = k.quant;
    c.state_quant_v = k.quant_v;
    auto t = Twin::Make(c, layout, 7);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->gpu->state_bytes(), t->cpu->state_bytes());
    EXPECT_EQ(t->gpu->state_bytes_fp32(), t->cpu->state_bytes_fp32());
    EXPECT_EQ(t->gpu->spectral_tensors(), 0);
    Diff worst;
    for (int step = 1; step <= 6; ++step) {
      auto g = RandomNormal(layout.n, 1000 + step, 0.5f);
      OptimizerStats sc, sg;
      t->Step(g, step, 0.5 + 0.1 * step, 0.5, &sc, &sg);
      Diff d = Differ(t->GpuWeights(), t->w_cpu);
      worst.max_abs = std::max(worst.max_abs, d.max_abs);
      worst.mismatches = std::max(worst.mismatches, d.mismatches);
      EXPECT_NEAR(sg.update_rms_adamw, sc.update_rms_adamw, 1e-6 * sc.update_rms_adamw);
      EXPECT_EQ(sg.psi_route, sc.psi_route);
    }
    const std::string bg = t->gpu->Save(), bc = t->cpu->Save();
    ASSERT_EQ(bg.size(), bc.size());
    size_t bytes_differ = 0;
    for (size_t i = 0; i < bg.size(); ++i) bytes_differ += bg[i] != bc[i];
    std::printf(
        "[adamw state_bits=%d %s v %s] weights: max |gpu - cpu| = %.3g, %zu of %zu values "
        "differ in any bit; state blob: %zu of %zu bytes differ\n",
        k.bits, k.quant, k.quant_v, worst.max_abs, worst.mismatches, layout.n, bytes_differ,
        bg.size());
    EXPECT_LE(worst.max_abs, 1e-6);
    EXPECT_LE(double(bytes_differ), 1e-3 * double(bg.size()));
  }
}

// ---- spectral: the optimizer's update against the CPU and float64 ----------------------------

// Offsets of each tensor's states in a CPU fp32 blob (Optimizer::Save order).
std::vector<size_t> StateOffsets(const config::OptimizerSection& c, const Layout& l) {
  std::vector<size_t> off;
  size_t pos = 0;
  for (const auto& t : l.params) {
    off.push_back(pos);
    const bool matrix = t.role != ParamRole::kVector && t.rows > 1 && t.cols > 1;
    const bool emb = t.role == ParamRole::kEmbedding || t.role == ParamRole::kHead;
    const bool spectral = c.kind == "spectral" && matrix && (!emb || c.spectral_embeddings);
    const int states = spectral && c.family == "momentum" ? 1 : 2;
    pos += states * t.numel() * sizeof(float);
  }
  return off;
}

bool IsSpectral(const config::OptimizerSection& c, const ParamTensor& t) {
  const bool matrix = t.role != ParamRole::kVector && t.rows > 1 && t.cols > 1;
  const bool emb = t.role == ParamRole::kEmbedding || t.role == ParamRole::kHead;
  return c.kind == "spectral" && matrix && (!emb || c.spectral_embeddings);
}

// The update lr * s * Psi_p(U) of every spectral tensor in float64, from the CPU's fp32 states
// after step `step` (blob), tensor after tensor.
std::vector<double> Float64Update(const config::OptimizerSection& c, const Layout& l,
                                  const std::string& blob, int64_t step, double lr_scale,
                                  double p) {
  const auto off = StateOffsets(c, l);
  const double bc1 = 1.0 - std::pow(c.beta1, double(step));
  const double bc2 = 1.0 - std::pow(c.beta2, double(step));
  const float ib1 = float(1.0 / bc1), ib2 = float(1.0 / bc2), eps = float(c.eps);
  kernels::PsiOptions opt;
  opt.ns_steps = c.ns_steps;
  opt.newton_iters = c.newton_iters;
  if (c.psi_method == "eigh") opt.method = kernels::PsiMethod::kEigh;
  std::vector<double> upd;
  for (size_t k = 0; k < l.params.size(); ++k) {
    const ParamTensor& t = l.params[k];
    if (!IsSpectral(c, t)) continue;
    const size_t n = t.numel();
    const float* m = reinterpret_cast<const float*>(blob.data() + off[k]);
    std::vector<double> dir(n), out(n);
    if (c.family == "momentum") {
      for (size_t i = 0; i < n; ++i) dir[i] = m[i];
    } else {
      const float* v = m + n;
      for (size_t i = 0; i < n; ++i)
        dir[i] = double(m[i] * ib1) / (std::sqrt(double(v[i] * ib2)) + double(eps));
    }
    Status s = kernels::Psi<double>(dir.data(), t.rows, t.cols, p, opt, out.data());
    EXPECT_TRUE(s.ok()) << s.ToString();
    const double lr = double(float(c.lr * lr_scale));
    const double scale = p == 0 ? lr * std::sqrt(std::max(1.0, double(t.rows) / t.cols)) : lr;
    for (size_t i = 0; i < n; ++i) upd.push_back(scale * out[i]);
  }
  return upd;
}

// W_before - W_after over the spectral tensors (weight decay 0: exactly the applied update).
std::vector<double> AppliedUpdate(const config::OptimizerSection& c, const Layout& l,
                                  const std::vector<float>& before,
                                  const std::vector<float>& after) {
  std::vector<double> u;
  for (const auto& t : l.params) {
    if (!IsSpectral(c, t)) continue;
    for (size_t i = t.offset; i < t.offset + t.numel(); ++i)
      u.push_back(double(before[i]) - double(after[i]));
  }
  return u;
}

struct SpectralCase {
  const char* family;
  double p;
  bool tf32;
  const char* method = "auto";
  double tol_vs_cpu;  // rel. L2 of the GPU update against the CPU's float update
  double tol_vs_f64;  // ... against the float64 update
};

TEST(DeviceOptimizerTest, SpectralUpdatesMatchCpuAndFloat64) {
  SKIP_WITHOUT_GPU();
  const Layout layout = SmallLayout();
  // Bounds: about 10x the values measured on an H200 (docs/bench/gpu_optim.md): fp32 1.6e-6
  // (Newton-Schulz), <= 1.1e-5 (coupled Newton, on rms directions whose Gram matrices are
  // ill-conditioned), 2.7e-5 (eigh); TF32 3.4e-3 (Newton-Schulz), <= 1.9e-3 (coupled Newton).
  const std::vector<SpectralCase> cases = {
      {"rms", 1.0, false, "auto", 1e-6, 1e-5},      {"rms", 0.0, false, "auto", 2e-5, 2e-5},
      {"rms", 0.5, false, "auto", 1e-4, 1e-4},      {"rms", 0.25, false, "auto", 1e-4, 1e-4},
      {"rms", 0.5, false, "eigh", 3e-4, 3e-4},      {"rms", 0.3, false, "auto", 3e-4, 3e-4},
      {"momentum", 1.0, false, "auto", 1e-6, 1e-5}, {"momentum", 0.0, false, "auto", 2e-5, 2e-5},
      {"momentum", 0.5, false, "auto", 1e-4, 1e-4}, {"momentum", 0.25, false, "auto", 1e-4, 1e-4},
      {"rms", 0.0, true, "auto", 3e-2, 3e-2},       {"rms", 0.5, true, "auto", 2e-2, 2e-2},
      {"rms", 0.25, true, "auto", 2e-2, 2e-2},      {"momentum", 0.0, true, "auto", 3e-2, 3e-2},
      {"momentum", 0.5, true, "auto", 2e-2, 2e-2},  {"momentum", 0.25, true, "auto", 2e-2, 2e-2},
  };
  std::printf("%-9s %5s %-5s %-15s | %-22s | %-22s | %-22s | %s\n", "family", "p", "tf32", "route",
              "gpu vs cpu relL2/cos", "gpu vs f64 relL2/cos", "cpu vs f64 relL2/cos",
              "residual cpu/gpu");
  for (const SpectralCase& k : cases) {
    config::OptimizerSection c;
    c.kind = "spectral";
    c.family = k.family;
    c.lr = 1e-2;
    c.lr_vector = 3e-3;
    c.spectral_embeddings = true;  // the (300, 64) embedding joins the r = 64 batch
    c.psi_method = k.method;
    c.tf32 = k.tf32;
    auto t = Twin::Make(c, layout, 11);
    ASSERT_TRUE(t);
    ASSERT_EQ(t->gpu->spectral_tensors(), t->cpu->spectral_tensors());
    ErrStats worst_gc{0, 1}, worst_gf{0, 1}, worst_cf{0, 1};
    std::string route;
    double res_c = 0, res_g = 0;
    for (int step = 1; step <= 3; ++step) {
      auto g = RandomNormal(layout.n, 2000 + step, 0.5f);
      const auto before_c = t->w_cpu;
      const auto before_g = t->GpuWeights();
      OptimizerStats sc, sg;
      t->Step(g, step, 1.0, k.p, &sc, &sg);
      const auto ug = AppliedUpdate(c, layout, before_g, t->GpuWeights());
      const auto uc = AppliedUpdate(c, layout, before_c, t->w_cpu);
      const auto uf = Float64Update(c, layout, t->cpu->Save(), step, 1.0, k.p);
      ASSERT_EQ(ug.size(), uf.size());
      ASSERT_TRUE(std::all_of(ug.begin(), ug.end(), [](double v) { return std::isfinite(v); }));
      auto upd = [](ErrStats* w, ErrStats e) {
        w->rel_l2 = std::max(w->rel_l2, e.rel_l2);
        w->cosine = std::min(w->cosine, e.cosine);
      };
      upd(&worst_gc, Compare(ug.data(), uc.data(), ug.size()));
      upd(&worst_gf, Compare(ug.data(), uf.data(), ug.size()));
      upd(&worst_cf, Compare(uc.data(), uf.data(), ug.size()));
      route = sg.psi_route;
      std::string want = sc.psi_route;
      if (k.tf32 && k.p != 1.0) want += "+tf32";
      EXPECT_EQ(sg.psi_route, want);
      EXPECT_NEAR(sg.update_rms_spectral, sc.update_rms_spectral,
                  k.tol_vs_cpu * sc.update_rms_spectral + 1e-12);
      EXPECT_NEAR(sg.update_rms_adamw, sc.update_rms_adamw, 1e-6 * sc.update_rms_adamw);
      res_c = std::max(res_c, sc.newton_residual);
      res_g = std::max(res_g, sg.newton_residual);
    }
    std::printf(
        "%-9s %5.2f %-5s %-15s | %10.3g / %9.7f | %10.3g / %9.7f | %10.3g / %9.7f | "
        "%.3g / %.3g\n",
        k.family, k.p, k.tf32 ? "on" : "off", route.c_str(), worst_gc.rel_l2, worst_gc.cosine,
        worst_gf.rel_l2, worst_gf.cosine, worst_cf.rel_l2, worst_cf.cosine, res_c, res_g);
    EXPECT_LE(worst_gc.rel_l2, k.tol_vs_cpu) << k.family << " p=" << k.p << " tf32=" << k.tf32;
    EXPECT_LE(worst_gf.rel_l2, k.tol_vs_f64) << k.family << " p=" << k.p << " tf32=" << k.tf32;
    // The residual is measured with fp32 products on both backends; under TF32 the iterate itself
    // differs by the tensor-core rounding, so only the fp32 runs must agree closely.
    if (route == "coupled_newton") {
      EXPECT_NEAR(res_g, res_c, 0.01 + 0.1 * res_c);
    } else if (route == "coupled_newton+tf32") {
      EXPECT_LT(res_g, 0.5 + 2 * res_c);
    }
  }
}

// ---- checkpoints across backends -------------------------------------------------------------

struct CkptCase {
  const char* kind;
  const char* family;
  double p;
  int bits;
  const char* quant;
  double tol;  // rel. L2 between the backends' updates after the hand-over
};

void RunHandOver(const CkptCase& k, bool gpu_first) {
  const Layout layout = SmallLayout();
  config::OptimizerSection c;
  c.kind = k.kind;
  c.family = k.family;
  c.lr = 1e-2;
  c.lr_vector = 3e-3;
  c.weight_decay = 0.05;
  c.state_bits = k.bits;
  c.state_quant = k.quant;
  auto w0 = RandomNormal(layout.n, 5, 0.02f);
  auto first_cpu = Optimizer::Create(c, layout.params, layout.n);
  auto first_gpu = DeviceOptimizer::Create(c, layout.params, layout.n, nullptr);
  ASSERT_TRUE(first_cpu.ok() && first_gpu.ok());
  DeviceFloats wg(w0), gg(layout.n);
  std::vector<float> wc = w0;
  // Three steps on the first backend.
  for (int step = 1; step <= 3; ++step) {
    auto g = RandomNormal(layout.n, 3000 + step, 0.5f);
    if (gpu_first) {
      gg.Upload(g);
      ASSERT_TRUE((*first_gpu)->Step(wg.get(), gg.get(), step, 1.0, k.p, nullptr).ok());
    } else {
      ASSERT_TRUE((*first_cpu)->Step(wc.data(), g.data(), step, 1.0, k.p, nullptr).ok());
    }
  }
  const std::string blob = gpu_first ? (*first_gpu)->Save() : (*first_cpu)->Save();
  const std::vector<float> handoff = gpu_first ? wg.Download() : wc;
  // The second backend loads the blob and the weights; the first continues as it was.
  auto second_cpu = Optimizer::Create(c, layout.params, layout.n);
  auto second_gpu = DeviceOptimizer::Create(c, layout.params, layout.n, nullptr);
  ASSERT_TRUE(second_cpu.ok() && second_gpu.ok());
  DeviceFloats wg2(handoff);
  std::vector<float> wc2 = handoff;
  Status ls = gpu_first ? (*second_cpu)->Load(blob) : (*second_gpu)->Load(blob);
  ASSERT_TRUE(ls.ok()) << ls.ToString();
  for (int step = 4; step <= 6; ++step) {
    auto g = RandomNormal(layout.n, 3000 + step, 0.5f);
    gg.Upload(g);
    if (gpu_first) {
      ASSERT_TRUE((*first_gpu)->Step(wg.get(), gg.get(), step, 1.0, k.p, nullptr).ok());
      ASSERT_TRUE((*second_cpu)->Step(wc2.data(), g.data(), step, 1.0, k.p, nullptr).ok());
    } else {
      ASSERT_TRUE((*first_cpu)->Step(wc.data(), g.data(), step, 1.0, k.p, nullptr).ok());
      ASSERT_TRUE((*second_gpu)->Step(wg2.get(), gg.get(), step, 1.0, k.p, nullptr).ok());
    }
  }
  const std::vector<float> a = gpu_first ? wg.Download() : wc;    // never switched
  const std::vector<float> b = gpu_first ? wc2 : wg2.Download();  // switched
  ASSERT_TRUE(AllFinite(a) && AllFinite(b));
  std::vector<double> ua(a.size()), ub(b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ua[i] = double(a[i]) - handoff[i];
    ub[i] = double(b[i]) - handoff[i];
  }
  ErrStats e = Compare(ub.data(), ua.data(), ua.size());
  Diff d = Differ(a, b);
  std::printf(
      "[hand-over %s %s p=%.2f state_bits=%d %s, %s -> %s] updates after: rel. L2 %.3g, "
      "max |dw| %.3g, %zu values differ\n",
      k.kind, k.family, k.p, k.bits, k.quant, gpu_first ? "gpu" : "cpu", gpu_first ? "cpu" : "gpu",
      e.rel_l2, d.max_abs, d.mismatches);
  EXPECT_LE(e.rel_l2, k.tol);
}

TEST(DeviceOptimizerTest, CheckpointsContinueOnTheOtherBackend) {
  SKIP_WITHOUT_GPU();
  const std::vector<CkptCase> cases = {
      {"adamw", "rms", 0.5, 8, "dynamic", 1e-6},
      {"adamw", "rms", 0.5, 32, "dynamic", 1e-6},
      {"spectral", "rms", 0.5, 8, "linear", 1e-5},  // measured <= 9.5e-7
      {"spectral", "momentum", 0.0, 32, "dynamic", 1e-5},
      {"spectral", "rms", 0.0, 8, "dynamic", 1e-5},
  };
  for (const auto& k : cases) {
    RunHandOver(k, /*gpu_first=*/true);
    RunHandOver(k, /*gpu_first=*/false);
  }
}

TEST(DeviceOptimizerTest, LoadRejectsAnotherLayout) {
  SKIP_WITHOUT_GPU();
  const Layout layout = SmallLayout();
  config::OptimizerSection c;
  c.state_bits = 8;
  auto gpu = DeviceOptimizer::Create(c, layout.params, layout.n, nullptr);
  ASSERT_TRUE(gpu.ok());
  std::string blob = (*gpu)->Save();
  ASSERT_EQ(blob.size(), (*gpu)->state_bytes());
  Status s = (*gpu)->Load(blob.substr(0, blob.size() - 1));
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("shorter"), std::string::npos) << s.ToString();
  s = (*gpu)->Load(blob + "x");
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("longer"), std::string::npos) << s.ToString();
  config::OptimizerSection fp32 = c;
  fp32.state_bits = 32;
  auto cpu = Optimizer::Create(fp32, layout.params, layout.n);
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ((*gpu)->Load((*cpu)->Save()).code(), StatusCode::kDataLoss);
  EXPECT_TRUE((*gpu)->Load(blob).ok());
}

// ---- robustness ------------------------------------------------------------------------------

TEST(DeviceOptimizerTest, ZeroGradientsStayFiniteOnEveryRoute) {
  SKIP_WITHOUT_GPU();
  const Layout layout = SmallLayout();
  struct ZCase {
    const char* kind;
    double p;
    int bits;
  };
  for (const ZCase& k :
       {ZCase{"adamw", 0.5, 8}, ZCase{"spectral", 0.0, 8}, ZCase{"spectral", 0.5, 32},
        ZCase{"spectral", 0.3, 32}, ZCase{"spectral", -1.0, 32}}) {
    config::OptimizerSection c;
    c.kind = k.kind;
    c.state_bits = k.bits;
    auto gpu = DeviceOptimizer::Create(c, layout.params, layout.n, nullptr);
    ASSERT_TRUE(gpu.ok());
    auto w = RandomNormal(layout.n, 9, 0.02f);
    DeviceFloats dw(w), dg(std::vector<float>(layout.n, 0.0f));
    OptimizerStats st;
    for (int step = 1; step <= 2; ++step) {
      Status s = (*gpu)->Step(dw.get(), dg.get(), step, 1.0, k.p, &st);
      ASSERT_TRUE(s.ok()) << s.ToString();
    }
    const auto after = dw.Download();
    EXPECT_TRUE(AllFinite(after)) << k.kind << " p=" << k.p;
    EXPECT_EQ(Differ(after, w).max_abs, 0.0) << k.kind << " p=" << k.p;
    EXPECT_EQ(st.update_rms_spectral, 0.0);
  }
}

TEST(DeviceOptimizerTest, BadArgumentsAreErrors) {
  SKIP_WITHOUT_GPU();
  const Layout layout = SmallLayout();
  config::OptimizerSection c;
  auto gpu = DeviceOptimizer::Create(c, layout.params, layout.n, nullptr);
  ASSERT_TRUE(gpu.ok());
  DeviceFloats w(layout.n), g(std::vector<float>(layout.n, 0.0f));
  Status s = (*gpu)->Step(w.get(), g.get(), 1, 1.0, 1.5, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("Psi_p of h.0.wq"), std::string::npos) << s.ToString();
  config::OptimizerSection ns = c;
  ns.psi_method = "newton_schulz";
  auto gns = DeviceOptimizer::Create(ns, layout.params, layout.n, nullptr);
  ASSERT_TRUE(gns.ok());
  EXPECT_EQ((*gns)->Step(w.get(), g.get(), 1, 1.0, 0.5, nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ((*gpu)->Step(w.get(), g.get(), 0, 1.0, 0.5, nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ((*gpu)->Step(nullptr, g.get(), 1, 1.0, 0.5, nullptr).code(),
            StatusCode::kInvalidArgument);
  std::vector<ParamTensor> outside = layout.params;
  outside.back().offset = layout.n;
  EXPECT_FALSE(DeviceOptimizer::Create(c, outside, layout.n, nullptr).ok());
}

TEST(DeviceOptimizerTest, EightBitStateSavesSeventyPercentOnGpt2Small) {
  SKIP_WITHOUT_GPU();
  auto model = Gpt<float>::Create(testing::Gpt2Small());
  ASSERT_TRUE(model.ok());
  for (const char* kind : {"adamw", "spectral"}) {
    config::OptimizerSection c;
    c.kind = kind;
    c.state_bits = 8;
    auto gpu = DeviceOptimizer::Create(c, model->params(), model->num_params(), nullptr);
    ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
    const double saved = 1.0 - double((*gpu)->state_bytes()) / double((*gpu)->state_bytes_fp32());
    std::printf(
        "[GPT-2 small, %s, 8-bit] state %.1f MB vs fp32 %.1f MB: %.1f%% saved; "
        "work space %.1f MB\n",
        kind, (*gpu)->state_bytes() / 1e6, (*gpu)->state_bytes_fp32() / 1e6, 100 * saved,
        (*gpu)->workspace_bytes() / 1e6);
    EXPECT_GE(saved, 0.70);
  }
}

}  // namespace
}  // namespace ablate::trainer::cuda
