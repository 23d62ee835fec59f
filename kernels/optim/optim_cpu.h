// The optimizers' per-element update rules on the CPU (kernels/ALGORITHMS.md §2.1): what
// trainer::Optimizer (worker/trainer/optim/optimizer.h) runs over each tensor, and the reference
// the device kernels (optim/cuda/optim_cuda.h) mirror operation for operation.
//
// Arithmetic: fp32 in the order written below, with the double hyper-parameters rounded to float
// once per step (MakeAdamScalars, StepLr, DecayFactor, SpectralScale); the sums of squared updates
// are double. Nothing is contracted into FMAs (this library is compiled with -ffp-contract=off), so
// a GPU kernel compiled with --fmad=false reproduces every value bit for bit.
// Buffers: n floats each; the state (m, v, B) and the weights w are updated in place; dir and upd
// must not alias the others.
// Threads: OpenMP over the elements (static schedule). Every updated value is independent of the
// thread count; the returned sums of squares are not in their last bits (the reduction's grouping).
#pragma once

#include <cstdint>

namespace ablate::kernels {

// Adam's per-step scalars as the update uses them: b1 = float(beta1), b2 = float(beta2),
// eps = float(eps), ib1 = float(1 / (1 - beta1^step)), ib2 = float(1 / (1 - beta2^step)) (the bias
// corrections, computed in double). step >= 1.
struct AdamScalars {
  float b1 = 0, b2 = 0, eps = 0, ib1 = 0, ib2 = 0;
};
AdamScalars MakeAdamScalars(double beta1, double beta2, double eps, int64_t step);

// A tensor's step size this step: float(lr * lr_scale) (lr_scale: the schedule's multiplier).
float StepLr(double lr, double lr_scale);
// The decoupled weight decay factor: float(1 - lr * weight_decay) for a matrix when
// weight_decay > 0, else 1.
float DecayFactor(bool matrix, double weight_decay, float lr);
// The spectral update's scale: lr, and at p = 0 float(lr * sqrt(max(1, rows / cols))).
float SpectralScale(float lr, double p, int rows, int cols);

// AdamW: m <- b1 m + (1 - b1) g, v <- b2 v + (1 - b2) g g, u = lr (m ib1) / (sqrt(v ib2) + eps),
// w <- w decay - u. Returns the sum of u^2 (double).
double AdamWUpdate(float* w, float* m, float* v, const float* g, int64_t n, const AdamScalars& a,
                   float lr, float decay);

// The RMS-normalized family's direction (never written back into m or v): m and v as AdamWUpdate,
// dir = (m ib1) / (sqrt(v ib2) + eps).
void RmsDirection(float* dir, float* m, float* v, const float* g, int64_t n, const AdamScalars& a);

// The first-moment family's direction: B <- mu B + gain g (gain: 1 for sum momentum, 1 - mu for
// ema), dir = gain g + mu B with Nesterov, else B.
void MomentumDirection(float* dir, float* B, const float* g, int64_t n, float mu, float gain,
                       bool nesterov);

// The spectral group's apply: u = scale upd (upd = Psi_p of the direction), w <- w decay - u.
// Returns the sum of u^2 (double).
double ApplySpectralUpdate(float* w, const float* upd, int64_t n, float scale, float decay);

}  // namespace ablate::kernels
