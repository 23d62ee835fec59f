// ablate-optim-bench: time of one DeviceOptimizer step for the GPT-2-small parameter set (12
// layers, d_model 768, vocab 50304, tied embedding: 124M parameters, 72 hidden matrices) on the
// GPU, for AdamW (fp32 and 8-bit state) and the spectral rms family at several p, TF32 off and on.
// Prints a markdown table (docs/bench/gpu_optim.md keeps the latest run). Exit 77 without a GPU.
//
// Each row: a fresh optimizer, two warm-up steps, one step with stats (route, residual: it
// synchronizes, so it is not timed), then `steps` timed steps between CUDA events on one stream.
// Weights ~ N(0, 0.02), gradients ~ N(0, 1e-3) (fixed across steps: the timing does not depend on
// the values).
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "optim_test_util.h"
#include "trainer/cuda/device_optimizer.h"

namespace {

using ablate::trainer::Gpt;
using ablate::config::OptimizerSection;
using ablate::trainer::OptimizerStats;
using ablate::trainer::cuda::DeviceOptimizer;
using ablate::trainer::cuda::testing::DeviceFloats;

// Fast pseudo-normal values (sum of four uniforms, rescaled): 124M of them in well under a second.
std::vector<float> Noise(size_t n, uint64_t seed, float scale) {
  std::vector<float> v(n);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < n; ++i) {
    float s = 0;
    for (int k = 0; k < 4; ++k) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      s += float(x >> 40) * (1.0f / 16777216.0f);
    }
    v[i] = (s - 2.0f) * 1.7320508f * scale;  // variance of the sum: 4/12
  }
  return v;
}

struct Row {
  std::string name;
  OptimizerSection cfg;
  double p;
  int steps;
};

}  // namespace

int main() {
  using ablate::trainer::cuda::testing::HaveGpu;
  if (!HaveGpu()) {
    std::fprintf(stderr, "ablate-optim-bench: no CUDA device\n");
    return 77;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  auto model = Gpt<float>::Create(ablate::trainer::cuda::testing::Gpt2Small());
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().ToString().c_str());
    return 1;
  }
  const size_t n = model->num_params();
  DeviceFloats w(Noise(n, 1, 0.02f)), g(Noise(n, 2, 1e-3f));
  cudaStream_t stream;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);

  auto spectral = [](double lr, bool tf32, int bits = 32) {
    OptimizerSection c;
    c.kind = "spectral";
    c.family = "rms";
    c.lr = lr;
    c.tf32 = tf32;
    c.state_bits = bits;
    return c;
  };
  OptimizerSection adamw;
  adamw.kind = "adamw";
  OptimizerSection adamw8 = adamw;
  adamw8.state_bits = 8;
  OptimizerSection muon = spectral(0.02, true);
  muon.family = "momentum";
  muon.momentum = 0.95;
  muon.momentum_kind = "ema";
  muon.nesterov = true;
  const std::vector<Row> rows = {
      {"AdamW", adamw, 0.5, 20},
      {"AdamW 8-bit (dynamic)", adamw8, 0.5, 20},
      {"spectral rms p=1 (no Psi: elementwise part)", spectral(1e-2, false), 1.0, 20},
      {"spectral rms p=0 (Newton-Schulz 5)", spectral(1e-2, false), 0.0, 5},
      {"spectral rms p=0 (Newton-Schulz 5), TF32", spectral(1e-2, true), 0.0, 5},
      {"spectral rms p=0.5 (coupled Newton 15 x 2)", spectral(1e-2, false), 0.5, 5},
      {"spectral rms p=0.5 (coupled Newton 15 x 2), TF32", spectral(1e-2, true), 0.5, 5},
      {"spectral rms p=0.25 (coupled Newton 15 x 3)", spectral(1e-2, false), 0.25, 3},
      {"spectral rms p=0.25 (coupled Newton 15 x 3), TF32", spectral(1e-2, true), 0.25, 3},
      {"spectral rms p=0.5, 8-bit state, TF32", spectral(1e-2, true, 8), 0.5, 5},
      {"Muon (momentum ema 0.95 + Nesterov) p=0, TF32", muon, 0.0, 5},
      {"spectral rms p=0.3 (eigh, cuSOLVER)", spectral(1e-2, false), 0.3, 1},
  };

  std::printf("GPU: %s, %d SMs, %.1f GiB; GPT-2 small: %zu parameters, %zu tensors\n\n", prop.name,
              prop.multiProcessorCount, prop.totalGlobalMem / 1073741824.0, n,
              model->params().size());
  std::printf(
      "| optimizer step | route | ms / step | state MB | fp32 state MB | saved | "
      "work space MB | newton residual |\n");
  std::printf("|---|---|---:|---:|---:|---:|---:|---:|\n");
  for (const Row& r : rows) {
    auto opt = DeviceOptimizer::Create(r.cfg, model->params(), n, stream);
    if (!opt.ok()) {
      std::printf("| %s | create failed: %s |\n", r.name.c_str(), opt.status().ToString().c_str());
      continue;
    }
    int64_t step = 1;
    bool ok = true;
    for (int i = 0; i < 2 && ok; ++i)
      ok = (*opt)->Step(w.get(), g.get(), step++, 1.0, r.p, nullptr).ok();
    OptimizerStats st;
    ablate::Status s = (*opt)->Step(w.get(), g.get(), step++, 1.0, r.p, &st);
    if (!ok || !s.ok()) {
      std::printf("| %s | step failed: %s |\n", r.name.c_str(), s.ToString().c_str());
      continue;
    }
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cudaEventRecord(e0, stream);
    for (int i = 0; i < r.steps; ++i)
      (void)(*opt)->Step(w.get(), g.get(), step++, 1.0, r.p, nullptr);
    cudaEventRecord(e1, stream);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    const cudaError_t err = cudaGetLastError();
    const double sb = double((*opt)->state_bytes()), fb = double((*opt)->state_bytes_fp32());
    std::printf("| %s | %s | %.2f | %.0f | %.0f | %.1f%% | %.0f | %s |\n", r.name.c_str(),
                st.psi_route.empty() ? "-" : st.psi_route.c_str(), ms / r.steps, sb / 1e6, fb / 1e6,
                100.0 * (1.0 - sb / fb), (*opt)->workspace_bytes() / 1e6,
                st.newton_residual > 0 ? std::to_string(st.newton_residual).c_str() : "-");
    if (err != cudaSuccess) std::printf("CUDA error: %s\n", cudaGetErrorString(err));
    std::fflush(stdout);
  }
  cudaStreamDestroy(stream);
  return 0;
}
