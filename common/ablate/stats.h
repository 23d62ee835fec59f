// Statistics for comparing ablation arms over seeds: summaries with
// their standard error, the paired comparison of two arms by seed (t interval and p-value, and
// an exact sign-flip permutation p-value that stays valid at small n), Welch's unpaired test
// for when seeds do not match, and Holm's step-down adjustment over a family of comparisons.
//
// Conventions: two-sided tests; intervals at `level` (0.95 by default) from Student's t; a
// sample of fewer than 2 values has no spread, fewer than 3 differences no interval (has_interval
// false: said so by the caller, never printed as 0). A difference that is exactly zero with zero
// spread is "no difference" (p = 1), not an error; a nonzero difference with zero spread has p =
// 0 by t and the smallest attainable permutation p-value. Non-finite inputs are the caller's to
// filter (diverged and failed trials are counted, not passed in). Pure functions, thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ablate::stats {

struct Summary {
  int n = 0;
  double mean = 0;
  double sd = 0;  // sample standard deviation (n - 1); 0 for n < 2
  double se = 0;  // sd / sqrt(n); 0 for n < 2
};
Summary Summarize(const std::vector<double>& x);

// The two-sided critical value t_{1 - (1 - level) / 2, df} (df > 0).
double TCritical(double df, double level = 0.95);
// The two-sided p-value of a t statistic with df degrees of freedom.
double TTwoSidedP(double t, double df);

struct Comparison {
  std::string test;    // "paired-t" or "welch-t"
  int n = 0;           // pairs (paired) or the smaller group's size (Welch)
  double delta = 0;    // mean difference, a - b
  double se = 0;       // its standard error
  bool has_interval = false;
  double ci_low = 0, ci_high = 0;
  double df = 0;
  double p_value = 1;  // t
  // Paired only: exact sign-flip permutation p-value (all 2^n sign patterns up to n = 20; above,
  // 2^20 patterns drawn from a fixed seed), counting patterns whose |mean| >= the observed.
  double p_permutation = 1;
};

// a[i] and b[i] are the same seed's values of two arms (the same length, >= 1).
Comparison Paired(const std::vector<double>& a, const std::vector<double>& b,
                  double level = 0.95);
// Unpaired (Welch-Satterthwaite degrees of freedom); each sample >= 1 value.
Comparison Welch(const std::vector<double>& a, const std::vector<double>& b, double level = 0.95);

// Holm's step-down adjustment: adjusted[i] for p[i], monotone in the sorted order, capped at 1.
std::vector<double> Holm(const std::vector<double>& p);

}  // namespace ablate::stats
