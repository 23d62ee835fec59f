// Helpers shared by the GPU optimizer test and benchmark: device buffers, layouts, error metrics.
#pragma once

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "trainer/model/gpt.h"

namespace ablate::trainer::cuda::testing {

inline bool HaveGpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

// An owning fp32 device array.
class DeviceFloats {
 public:
  explicit DeviceFloats(size_t n) : n_(n) {
    if (cudaMalloc(reinterpret_cast<void**>(&p_), sizeof(float) * (n ? n : 1)) != cudaSuccess)
      p_ = nullptr;
  }
  explicit DeviceFloats(const std::vector<float>& h) : DeviceFloats(h.size()) { Upload(h); }
  ~DeviceFloats() { cudaFree(p_); }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;
  float* get() const { return p_; }
  size_t size() const { return n_; }
  void Upload(const std::vector<float>& h) {
    cudaMemcpy(p_, h.data(), sizeof(float) * h.size(), cudaMemcpyHostToDevice);
  }
  std::vector<float> Download() const {
    std::vector<float> h(n_);
    cudaDeviceSynchronize();
    cudaMemcpy(h.data(), p_, sizeof(float) * n_, cudaMemcpyDeviceToHost);
    return h;
  }

 private:
  float* p_ = nullptr;
  size_t n_ = 0;
};

inline std::vector<float> RandomNormal(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// The parameter layout (and the model) of a GPT config: the tests use the model's own tensor list.
inline ModelConfig SmallGpt() {
  ModelConfig m;
  m.vocab_size = 300;
  m.seq_len = 16;
  m.layers = 2;
  m.d_model = 64;
  m.heads = 4;
  return m;
}

inline ModelConfig Gpt2Small() {
  ModelConfig m;
  m.vocab_size = 50304;
  m.seq_len = 1024;
  m.layers = 12;
  m.d_model = 768;
  m.heads = 12;
  m.qk_norm = false;  // GPT-2's shape
  m.tie_embeddings = true;
  return m;
}

struct ErrStats {
  double rel_l2 = 0;  // ||a - b|| / ||b||
  double cosine = 1;
};

template <typename A, typename B>
ErrStats Compare(const A* a, const B* b, size_t n) {
  double d2 = 0, b2 = 0, a2 = 0, ab = 0;
  for (size_t i = 0; i < n; ++i) {
    const double x = double(a[i]), y = double(b[i]);
    d2 += (x - y) * (x - y);
    a2 += x * x;
    b2 += y * y;
    ab += x * y;
  }
  ErrStats e;
  e.rel_l2 = b2 > 0 ? std::sqrt(d2 / b2) : std::sqrt(d2);
  e.cosine = (a2 > 0 && b2 > 0) ? ab / std::sqrt(a2 * b2) : (a2 == b2 ? 1.0 : 0.0);
  return e;
}

}  // namespace ablate::trainer::cuda::testing
