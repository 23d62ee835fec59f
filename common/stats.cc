// See ablate/stats.h. Student's t comes from Boost.Math (header-only).
#include "ablate/stats.h"

#include <algorithm>
#include <boost/math/distributions/students_t.hpp>
#include <cmath>
#include <numeric>
#include <random>

namespace ablate::stats {
namespace {

constexpr int kExactFlipsMax = 20;

// Sign-flip permutation p-value of the mean of d: the share of sign patterns whose |mean| is at
// least the observed one (the observed pattern included, so p > 0).
double SignFlipP(const std::vector<double>& d) {
  const int n = int(d.size());
  double obs = 0;
  for (double x : d) obs += x;
  obs = std::fabs(obs);
  // A tolerance for ties: sums that equal the observed one up to rounding count as extreme.
  const double tol = 1e-12 * (std::fabs(obs) + 1.0);
  auto sum_of = [&](uint64_t signs) {
    double s = 0;
    for (int i = 0; i < n; ++i) s += (signs >> i & 1) ? -d[i] : d[i];
    return std::fabs(s);
  };
  uint64_t count = 0, total = 0;
  if (n <= kExactFlipsMax) {
    total = uint64_t(1) << n;
    for (uint64_t m = 0; m < total; ++m) count += sum_of(m) >= obs - tol;
  } else {
    std::mt19937_64 rng(0x5eed);
    total = uint64_t(1) << kExactFlipsMax;
    count = 1;  // the observed pattern
    for (uint64_t k = 1; k < total; ++k) count += sum_of(rng()) >= obs - tol;
  }
  return double(count) / double(total);
}

}  // namespace

Summary Summarize(const std::vector<double>& x) {
  Summary s;
  s.n = int(x.size());
  if (s.n == 0) return s;
  s.mean = std::accumulate(x.begin(), x.end(), 0.0) / s.n;
  if (s.n < 2) return s;
  double ss = 0;
  for (double v : x) ss += (v - s.mean) * (v - s.mean);
  s.sd = std::sqrt(ss / (s.n - 1));
  s.se = s.sd / std::sqrt(double(s.n));
  return s;
}

double TCritical(double df, double level) {
  const boost::math::students_t dist(df);
  return boost::math::quantile(dist, 1.0 - (1.0 - level) / 2.0);
}

double TTwoSidedP(double t, double df) {
  if (std::isinf(t)) return 0.0;
  const boost::math::students_t dist(df);
  return std::min(1.0, 2.0 * boost::math::cdf(boost::math::complement(dist, std::fabs(t))));
}

Comparison Paired(const std::vector<double>& a, const std::vector<double>& b, double level) {
  Comparison c;
  c.test = "paired-t";
  std::vector<double> d(std::min(a.size(), b.size()));
  for (size_t i = 0; i < d.size(); ++i) d[i] = a[i] - b[i];
  const Summary s = Summarize(d);
  c.n = s.n;
  c.delta = s.mean;
  c.se = s.se;
  c.df = s.n - 1;
  if (s.n == 0) return c;
  c.p_permutation = SignFlipP(d);
  if (s.n < 2) return c;  // no spread: no test, p stays 1
  if (s.se == 0) {
    c.p_value = s.mean == 0 ? 1.0 : 0.0;  // exactly no difference / a constant shift
  } else {
    c.p_value = TTwoSidedP(s.mean / s.se, c.df);
  }
  if (s.n >= 3) {
    const double h = TCritical(c.df, level) * s.se;
    c.has_interval = true;
    c.ci_low = s.mean - h;
    c.ci_high = s.mean + h;
  }
  return c;
}

Comparison Welch(const std::vector<double>& a, const std::vector<double>& b, double level) {
  Comparison c;
  c.test = "welch-t";
  const Summary sa = Summarize(a), sb = Summarize(b);
  c.n = std::min(sa.n, sb.n);
  c.delta = sa.mean - sb.mean;
  if (sa.n < 2 || sb.n < 2) return c;
  const double va = sa.sd * sa.sd / sa.n, vb = sb.sd * sb.sd / sb.n;
  c.se = std::sqrt(va + vb);
  if (c.se == 0) {
    c.p_value = c.delta == 0 ? 1.0 : 0.0;
    c.df = sa.n + sb.n - 2;
  } else {
    c.df = (va + vb) * (va + vb) /
           (va * va / (sa.n - 1) + vb * vb / (sb.n - 1));
    c.p_value = TTwoSidedP(c.delta / c.se, c.df);
  }
  if (std::min(sa.n, sb.n) >= 3) {
    const double h = TCritical(c.df, level) * c.se;
    c.has_interval = true;
    c.ci_low = c.delta - h;
    c.ci_high = c.delta + h;
  }
  return c;
}

std::vector<double> Holm(const std::vector<double>& p) {
  const size_t m = p.size();
  std::vector<size_t> order(m);
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t i, size_t j) { return p[i] < p[j]; });
  std::vector<double> adj(m);
  double running = 0;
  for (size_t k = 0; k < m; ++k) {
    const size_t i = order[k];
    running = std::max(running, std::min(1.0, double(m - k) * p[i]));
    adj[i] = running;
  }
  return adj;
}

}  // namespace ablate::stats
