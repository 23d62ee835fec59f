// The order of sweep axis values (text as the sweep spells them): numbers numerically ("8192"
// before "16384", "1e-04" before "0.01"), before any text; text lexically; two spellings of one
// number ("1", "1.0") by their text. Used wherever axis values are sorted (the results table,
// the trials API, the comparison of arms), so all of them agree.
#pragma once

#include <cstdlib>
#include <string>

namespace ablate {

inline bool AxisValueAsNumber(const std::string& s, double* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

inline bool AxisValueLess(const std::string& a, const std::string& b) {
  double x = 0, y = 0;
  const bool na = AxisValueAsNumber(a, &x), nb = AxisValueAsNumber(b, &y);
  if (na && nb && x != y) return x < y;
  if (na != nb) return na;
  return a < b;
}

}  // namespace ablate
