// The optimizers' per-element update rules (optim_cpu.h). Each loop is written as the device
// kernels of optim/cuda/optim_cuda.cu compute it; keep the two in step.
#include "optim/optim_cpu.h"

#include <omp.h>

#include <algorithm>
#include <cmath>

namespace ablate::kernels {

AdamScalars MakeAdamScalars(double beta1, double beta2, double eps, int64_t step) {
  const double bc1 = 1.0 - std::pow(beta1, double(step));
  const double bc2 = 1.0 - std::pow(beta2, double(step));
  AdamScalars a;
  a.b1 = float(beta1);
  a.b2 = float(beta2);
  a.eps = float(eps);
  a.ib1 = float(1.0 / bc1);
  a.ib2 = float(1.0 / bc2);
  return a;
}

float StepLr(double lr, double lr_scale) { return float(lr * lr_scale); }

float DecayFactor(bool matrix, double weight_decay, float lr) {
  return (matrix && weight_decay > 0) ? float(1.0 - lr * weight_decay) : 1.0f;
}

float SpectralScale(float lr, double p, int rows, int cols) {
  return p == 0 ? float(lr * std::sqrt(std::max(1.0, double(rows) / cols))) : lr;
}

double AdamWUpdate(float* w, float* m, float* v, const float* g, int64_t n, const AdamScalars& a,
                   float lr, float decay) {
  const float b1 = a.b1, b2 = a.b2, eps = a.eps, ib1 = a.ib1, ib2 = a.ib2;
  double sq = 0;
#pragma omp parallel for reduction(+ : sq) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    m[i] = b1 * m[i] + (1 - b1) * g[i];
    v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
    float u = lr * (m[i] * ib1) / (std::sqrt(v[i] * ib2) + eps);
    w[i] = w[i] * decay - u;
    sq += double(u) * u;
  }
  return sq;
}

void RmsDirection(float* dir, float* m, float* v, const float* g, int64_t n, const AdamScalars& a) {
  const float b1 = a.b1, b2 = a.b2, eps = a.eps, ib1 = a.ib1, ib2 = a.ib2;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    m[i] = b1 * m[i] + (1 - b1) * g[i];
    v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
    dir[i] = (m[i] * ib1) / (std::sqrt(v[i] * ib2) + eps);
  }
}

void MomentumDirection(float* dir, float* B, const float* g, int64_t n, float mu, float gain,
                       bool nesterov) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    B[i] = mu * B[i] + gain * g[i];
    dir[i] = nesterov ? gain * g[i] + mu * B[i] : B[i];
  }
}

double ApplySpectralUpdate(float* w, const float* upd, int64_t n, float scale, float decay) {
  double sq = 0;
#pragma omp parallel for reduction(+ : sq) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float u = scale * upd[i];
    w[i] = w[i] * decay - u;
    sq += double(u) * u;
  }
  return sq;
}

}  // namespace ablate::kernels
