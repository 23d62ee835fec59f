// Shared pieces of the attention tests: random inputs, running fpa / SageBwd end to end, and
// comparing outputs and gradients against the float64 fpa reference.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "attention/attention_cpu.h"

namespace ablate::kernels::testing {

// Inputs of one attention call, in double; q, k ~ N(0, sigma_qk), v, dout ~ N(0, 1).
struct Inputs {
  AttnShape s;
  std::vector<double> q, k, v, dout;  // (B, H, N, D)
};

inline std::vector<double> RandomNormal(std::mt19937_64& rng, int64_t n, double sigma,
                                        double mean = 0) {
  std::normal_distribution<double> dist(mean, sigma);
  std::vector<double> x(n);
  for (auto& e : x) e = dist(rng);
  return x;
}

inline Inputs MakeInputs(const AttnShape& s, double sigma_qk, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Inputs in;
  in.s = s;
  in.q = RandomNormal(rng, s.numel(), sigma_qk);
  in.k = RandomNormal(rng, s.numel(), sigma_qk);
  in.v = RandomNormal(rng, s.numel(), 1.0);
  in.dout = RandomNormal(rng, s.numel(), 1.0);
  return in;
}

// Forward output and input gradients of one run, widened to double.
struct Result {
  std::vector<double> o, lse, dq, dk, dv;
};

inline Result RunFpa(const Inputs& in) {
  const AttnShape& s = in.s;
  Result r;
  r.o.resize(s.numel());
  r.lse.resize(s.rows());
  r.dq.resize(s.numel());
  r.dk.resize(s.numel());
  r.dv.resize(s.numel());
  FpaForward<double>(s, in.q.data(), in.k.data(), in.v.data(), r.o.data(), r.lse.data());
  FpaBackward<double>(s, in.q.data(), in.k.data(), in.v.data(), r.o.data(), r.lse.data(),
                      in.dout.data(), r.dq.data(), r.dk.data(), r.dv.data());
  return r;
}

template <typename T>
std::vector<T> Cast(const std::vector<double>& x) {
  return std::vector<T>(x.begin(), x.end());
}

// Runs the SageBwd emulator in T. Outputs start as NaN so that an unwritten element shows.
template <typename T>
Result RunSage(const Inputs& in, const AttnOptions& opt, SageDebug<T>* debug = nullptr,
               SageSaved<T>* saved_out = nullptr) {
  const AttnShape& s = in.s;
  const T nan = std::numeric_limits<T>::quiet_NaN();
  const auto q = Cast<T>(in.q), k = Cast<T>(in.k), v = Cast<T>(in.v), dout = Cast<T>(in.dout);
  std::vector<T> o(s.numel(), nan), dq(s.numel(), nan), dk(s.numel(), nan), dv(s.numel(), nan);
  SageSaved<T> saved;
  saved.lse.assign(s.rows(), nan);
  SageForward<T>(s, opt, q.data(), k.data(), v.data(), o.data(), &saved);
  SageBackward<T>(s, opt, q.data(), k.data(), v.data(), o.data(), dout.data(), saved, dq.data(),
                  dk.data(), dv.data(), debug);
  Result r;
  r.o.assign(o.begin(), o.end());
  r.lse.assign(saved.lse.begin(), saved.lse.end());
  r.dq.assign(dq.begin(), dq.end());
  r.dk.assign(dk.begin(), dk.end());
  r.dv.assign(dv.begin(), dv.end());
  if (saved_out) *saved_out = std::move(saved);
  return r;
}

struct Report {
  ErrorStats o, dq, dk, dv;
  double worst_cosine() const { return std::min({o.cosine, dq.cosine, dk.cosine, dv.cosine}); }
  double worst_rel_l2() const { return std::max({o.rel_l2, dq.rel_l2, dk.rel_l2, dv.rel_l2}); }
};

inline Report Compare(const Result& x, const Result& ref) {
  const int64_t n = static_cast<int64_t>(ref.o.size());
  return {
      CompareTensors(x.o.data(), ref.o.data(), n), CompareTensors(x.dq.data(), ref.dq.data(), n),
      CompareTensors(x.dk.data(), ref.dk.data(), n), CompareTensors(x.dv.data(), ref.dv.data(), n)};
}

inline bool AllFinite(const std::vector<double>& x) {
  for (double e : x) {
    if (!std::isfinite(e)) return false;
  }
  return true;
}

}  // namespace ablate::kernels::testing
