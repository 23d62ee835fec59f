// Helpers of the GPU trainer tests: device buffers, random data, error measures. Tests skip
// (GTEST_SKIP) when no CUDA device is visible.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "ablate/bf16.h"

namespace ablate::gputest {

inline bool HaveGpu() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return n > 0;
}

#define SKIP_WITHOUT_GPU() \
  if (!::ablate::gputest::HaveGpu()) GTEST_SKIP() << "no CUDA device"

template <typename T>
struct Dev {
  T* p = nullptr;
  size_t n = 0;
  explicit Dev(size_t count) : n(count) {
    if (cudaMalloc(&p, std::max<size_t>(count, 1) * sizeof(T)) != cudaSuccess) p = nullptr;
  }
  explicit Dev(const std::vector<T>& host) : Dev(host.size()) { Put(host); }
  ~Dev() { cudaFree(p); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  void Put(const std::vector<T>& host) {
    cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  }
  std::vector<T> Get() const {
    std::vector<T> h(n);
    cudaDeviceSynchronize();
    cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost);
    return h;
  }
};

inline std::vector<float> Randn(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

inline std::vector<float> RoundBf16(std::vector<float> v) {
  for (float& x : v) x = RoundToBf16(x);
  return v;
}
inline std::vector<__nv_bfloat16> ToBf16(const std::vector<float>& v) {
  std::vector<__nv_bfloat16> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = __float2bfloat16_rn(v[i]);
  return o;
}
inline std::vector<float> FromBf16(const std::vector<__nv_bfloat16>& v) {
  std::vector<float> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = __bfloat162float(v[i]);
  return o;
}
template <typename T>
std::vector<double> ToDouble(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// Relative L2 error of x against the reference y, and cosine similarity.
template <typename TX>
double RelL2(const std::vector<TX>& x, const std::vector<double>& y) {
  double dd = 0, yy = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    const double d = double(x[i]) - y[i];
    dd += d * d;
    yy += y[i] * y[i];
  }
  return yy > 0 ? std::sqrt(dd / yy) : std::sqrt(dd);
}
template <typename TX>
double Cosine(const std::vector<TX>& x, const std::vector<double>& y) {
  double xy = 0, xx = 0, yy = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    xy += double(x[i]) * y[i];
    xx += double(x[i]) * double(x[i]);
    yy += y[i] * y[i];
  }
  return (xx == 0 && yy == 0) ? 1.0 : xy / std::sqrt(xx * yy);
}
// max |x - y| / (atol + rtol |y|) <= 1 is the usual allclose.
template <typename TX>
double MaxScaledErr(const std::vector<TX>& x, const std::vector<double>& y, double atol,
                    double rtol) {
  double m = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    m = std::max(m, std::fabs(double(x[i]) - y[i]) / (atol + rtol * std::fabs(y[i])));
  }
  return m;
}

}  // namespace ablate::gputest
