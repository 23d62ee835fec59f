// See compare.h.
#include "analysis/compare.h"

#include <algorithm>
#include <set>

namespace ablate::analysis {
namespace {

struct KeyLess {
  bool operator()(const std::vector<std::string>& a, const std::vector<std::string>& b) const {
    return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end(), AxisValueLess);
  }
};
struct ValueLess {
  bool operator()(const std::string& a, const std::string& b) const { return AxisValueLess(a, b); }
};

// One (level, seed) of a cell: the mean over its trials when all have values.
struct SeedCell {
  double sum = 0;
  int n = 0, trials = 0;
  bool diverged = false, failed = false, missing = false;
  bool complete() const { return !diverged && !failed && !missing && n == trials && n > 0; }
  double mean() const { return sum / n; }
};
using LevelSeeds = std::map<std::string, SeedCell, ValueLess>;  // by seed

LevelCount CountOf(const LevelSeeds& seeds) {
  LevelCount c;
  for (const auto& [seed, s] : seeds) {
    ++c.seeds;
    if (s.diverged) {
      ++c.diverged;
    } else if (s.failed) {
      ++c.failed;
    } else if (s.missing) {
      ++c.missing;
    }
    c.complete += s.complete();
  }
  return c;
}

std::string Join(const std::set<std::string, ValueLess>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "none" : out;
}

}  // namespace

StatusOr<CompareResult> Compare(const std::vector<TrialValue>& trials, const CompareSpec& spec) {
  std::set<std::string, ValueLess> axes;
  for (const TrialValue& t : trials) {
    for (const auto& [k, v] : t.axes) axes.insert(k);
  }
  if (spec.factor.empty() || spec.factor == "seed") {
    return InvalidArgument("compare: the factor must be an axis other than the seed (axes: " +
                           Join(axes) + ")");
  }
  if (!axes.count(spec.factor)) {
    return InvalidArgument("compare: '" + spec.factor + "' is not an axis of the sweep (axes: " +
                           Join(axes) + ")");
  }
  for (const std::string& b : spec.by) {
    if (b == spec.factor) {
      return InvalidArgument("compare: '" + b + "' is the factor; it cannot also be a --by axis");
    }
    if (!axes.count(b)) {
      return InvalidArgument("compare: --by '" + b + "' is not an axis of the sweep (axes: " +
                             Join(axes) + ")");
    }
  }

  // cell -> level -> seed
  std::map<std::vector<std::string>, std::map<std::string, LevelSeeds, ValueLess>, KeyLess> cells;
  std::set<std::string, ValueLess> levels;
  for (const TrialValue& t : trials) {
    auto f = t.axes.find(spec.factor);
    if (f == t.axes.end()) continue;
    std::vector<std::string> cell;
    for (const std::string& b : spec.by) {
      auto it = t.axes.find(b);
      cell.push_back(it == t.axes.end() ? "" : it->second);
    }
    levels.insert(f->second);
    SeedCell& s = cells[cell][f->second][t.seed];
    ++s.trials;
    switch (t.outcome) {
      case Outcome::kOk:
        s.sum += t.value;
        ++s.n;
        break;
      case Outcome::kDiverged:
        s.diverged = true;
        break;
      case Outcome::kFailed:
        s.failed = true;
        break;
      case Outcome::kMissing:
        s.missing = true;
        break;
    }
  }
  CompareResult out;
  out.levels.assign(levels.begin(), levels.end());
  out.baseline = spec.baseline.empty() ? out.levels.front() : spec.baseline;
  if (!levels.count(out.baseline)) {
    return InvalidArgument("compare: baseline '" + out.baseline + "' is not a level of '" +
                           spec.factor + "' (levels: " + Join(levels) + ")");
  }

  for (const auto& [cell, by_level] : cells) {
    static const LevelSeeds kNone;
    auto bit = by_level.find(out.baseline);
    const LevelSeeds& base = bit == by_level.end() ? kNone : bit->second;
    for (const auto& [level, seeds] : by_level) {
      if (level == out.baseline) continue;
      ComparisonRow r;
      r.cell = cell;
      r.value = level;
      r.baseline = out.baseline;
      r.level_count = CountOf(seeds);
      r.baseline_count = CountOf(base);
      std::vector<double> a, b;
      for (const auto& [seed, s] : seeds) {
        auto other = base.find(seed);
        if (s.complete() && other != base.end() && other->second.complete()) {
          a.push_back(s.mean());
          b.push_back(other->second.mean());
        }
      }
      if (!a.empty()) {
        r.test = stats::Paired(a, b, spec.level);
        r.mean = stats::Summarize(a).mean;
        r.baseline_mean = stats::Summarize(b).mean;
      } else {  // no seed in common: unpaired, over each side's complete seeds
        r.paired = false;
        for (const auto& [seed, s] : seeds) {
          if (s.complete()) a.push_back(s.mean());
        }
        for (const auto& [seed, s] : base) {
          if (s.complete()) b.push_back(s.mean());
        }
        if (!a.empty() && !b.empty()) {
          r.test = stats::Welch(a, b, spec.level);
          r.mean = stats::Summarize(a).mean;
          r.baseline_mean = stats::Summarize(b).mean;
        } else {
          r.test.test = "none";
        }
      }
      r.left_out = r.level_count.seeds + r.baseline_count.seeds -
                   (r.paired ? 2 * r.test.n : int(a.size() + b.size()));
      out.rows.push_back(std::move(r));
    }
  }
  std::vector<double> p;
  for (const ComparisonRow& r : out.rows) p.push_back(r.test.p_value);
  const std::vector<double> adj = stats::Holm(p);
  for (size_t i = 0; i < out.rows.size(); ++i) out.rows[i].p_adjusted = adj[i];
  return out;
}

}  // namespace ablate::analysis
