// See results.h.
#include "analysis/results.h"

#include <cmath>

namespace ablate::analysis {

bool LowerIsBetter(const std::string& metric) {
  for (const char* word : {"loss", "bpb", "perplexity", "ppl", "error", "time", "residual"}) {
    if (metric.find(word) != std::string::npos) return true;
  }
  return false;
}

int SeparatedBest(const std::vector<server::ResultRow>& rows, bool lower) {
  int best = -1;
  for (int i = 0; i < int(rows.size()); ++i) {
    const auto& r = rows[i];
    if (r.n <= 0 || !std::isfinite(r.mean)) continue;
    if (best < 0 || (lower ? r.mean < rows[best].mean : r.mean > rows[best].mean)) best = i;
  }
  if (best < 0 || !std::isfinite(rows[best].ci_low)) return -1;
  int others = 0;
  for (int i = 0; i < int(rows.size()); ++i) {
    const auto& r = rows[i];
    if (i == best || r.n <= 0 || !std::isfinite(r.mean)) continue;
    ++others;
    if (!std::isfinite(r.ci_low)) return -1;
    const bool apart = lower ? rows[best].ci_high < r.ci_low : rows[best].ci_low > r.ci_high;
    if (!apart) return -1;
  }
  return others > 0 ? best : -1;
}

}  // namespace ablate::analysis
