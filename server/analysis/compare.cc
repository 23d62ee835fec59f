// See compare.h.
#include "analysis/compare.h"

#include <algorithm>
#include <set>
#include <string>

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
  bool diverged = false, failed = false, missing = false, stopped = false;
  std::set<std::string> builds;
  bool complete() const {
    return !diverged && !failed && !missing && !stopped && n == trials && n > 0;
  }
  void Add(const TrialValue& t) {
    ++trials;
    builds.insert(t.builds.begin(), t.builds.end());
    switch (t.outcome) {
      case Outcome::kOk:
        sum += t.value;
        ++n;
        break;
      case Outcome::kDiverged:
        diverged = true;
        break;
      case Outcome::kFailed:
        failed = true;
        break;
      case Outcome::kMissing:
        missing = true;
        break;
      case Outcome::kStopped:
        stopped = true;
        break;
      case Outcome::kCanceled:  // filtered out before any cell is built
        break;
    }
  }
  double mean() const { return sum / n; }
};
using LevelSeeds = std::map<std::string, SeedCell, ValueLess>;  // by seed

LevelCount CountOf(const LevelSeeds& seeds) {
  LevelCount c;
  std::set<std::string> builds;
  for (const auto& [seed, s] : seeds) {
    if (s.complete()) builds.insert(s.builds.begin(), s.builds.end());
    ++c.seeds;
    if (s.diverged) {
      ++c.diverged;
    } else if (s.failed) {
      ++c.failed;
    } else if (s.stopped) {
      ++c.stopped;
    } else if (s.missing) {
      ++c.missing;
    }
    c.complete += s.complete();
  }
  c.builds = int(builds.size());
  return c;
}

std::string Join(const std::set<std::string, ValueLess>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "none" : out;
}

// best_over: keeps, per (cell, level), only the trials at the level's best value of the axis, and
// only the test seeds; records the choices. `cell_of` maps a trial to its cell key.
struct BestChoice {
  std::map<std::pair<std::vector<std::string>, std::string>, std::string> value;  // (cell, level)
};

}  // namespace

StatusOr<CompareResult> Compare(const std::vector<TrialValue>& all, const CompareSpec& spec) {
  // Canceled trials are no result: left out as if never run.
  std::vector<TrialValue> trials;
  trials.reserve(all.size());
  for (const TrialValue& t : all) {
    if (t.outcome != Outcome::kCanceled) trials.push_back(t);
  }
  std::set<std::string, ValueLess> axes;
  for (const TrialValue& t : all) {
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

  const bool best_over = !spec.best_over.empty();
  std::set<std::string, ValueLess> select(spec.select_seeds.begin(), spec.select_seeds.end());
  if (best_over) {
    if (spec.best_over == spec.factor || spec.best_over == "seed" ||
        std::find(spec.by.begin(), spec.by.end(), spec.best_over) != spec.by.end()) {
      return InvalidArgument("compare: --best-over '" + spec.best_over +
                             "' must be an axis other than the factor, the seed and the --by axes");
    }
    if (!axes.count(spec.best_over)) {
      return InvalidArgument("compare: --best-over '" + spec.best_over +
                             "' is not an axis of the sweep (axes: " + Join(axes) + ")");
    }
  } else if (!select.empty()) {
    return InvalidArgument("compare: --select-seeds needs --best-over (the axis to choose)");
  }
  std::set<std::string, ValueLess> seeds_seen;
  for (const TrialValue& t : all) seeds_seen.insert(t.seed);
  for (const std::string& s : select) {
    if (!seeds_seen.count(s)) {
      return InvalidArgument("compare: --select-seeds " + s + " is not a seed of the sweep (seeds: " +
                             Join(seeds_seen) + ")");
    }
  }
  std::set<std::string, ValueLess> test_seeds;
  for (const std::string& s : seeds_seen) {
    if (!select.count(s)) test_seeds.insert(s);
  }
  if (!select.empty() && test_seeds.empty()) {
    return InvalidArgument("compare: --select-seeds takes every seed; none is left to test on");
  }
  auto cell_of = [&](const TrialValue& t) {
    std::vector<std::string> cell;
    for (const std::string& b : spec.by) {
      auto it = t.axes.find(b);
      cell.push_back(it == t.axes.end() ? "" : it->second);
    }
    return cell;
  };
  // best_over: per (cell, level), the value with the best mean over the selection seeds that every
  // value has (all of them complete there, none diverged anywhere); then only the trials at that
  // value (and, with select_seeds, of the test seeds) go on.
  std::map<std::pair<std::vector<std::string>, std::string>, std::string> chosen;
  std::vector<TrialValue> kept;
  if (best_over) {
    // (cell, level) -> value -> seed -> SeedCell
    std::map<std::pair<std::vector<std::string>, std::string>,
             std::map<std::string, LevelSeeds, ValueLess>>
        by_value;
    for (const TrialValue& t : trials) {
      auto f = t.axes.find(spec.factor);
      auto x = t.axes.find(spec.best_over);
      if (f == t.axes.end() || x == t.axes.end()) continue;
      if (!select.empty() && !select.count(t.seed)) continue;
      by_value[{cell_of(t), f->second}][x->second][t.seed].Add(t);
    }
    for (const auto& [key, values] : by_value) {
      // The seeds every value of this (cell, level) has: each value is judged on the same ones.
      std::set<std::string, ValueLess> common;
      for (const auto& [seed, s] : values.begin()->second) common.insert(seed);
      for (const auto& value_seeds : values) {
        const auto& seeds = value_seeds.second;
        std::erase_if(common, [&](const std::string& x) { return !seeds.count(x); });
      }
      std::string best;
      double best_mean = 0;
      for (const auto& [value, seeds] : values) {
        double sum = 0;
        bool ok = !common.empty();
        for (const auto& [seed, s] : seeds) {
          ok = ok && !s.diverged;  // a rate that diverged on any seed is not a best rate
          if (!common.count(seed)) continue;
          ok = ok && s.complete();
          if (s.complete()) sum += s.mean();
        }
        if (!ok) continue;
        const double m = sum / double(common.size());
        if (best.empty() || (spec.lower_is_better ? m < best_mean : m > best_mean)) {
          best = value;
          best_mean = m;
        }
      }
      chosen[key] = best;
    }
    for (const TrialValue& t : trials) {
      auto f = t.axes.find(spec.factor);
      auto x = t.axes.find(spec.best_over);
      if (f == t.axes.end() || x == t.axes.end()) continue;
      if (!select.empty() && select.count(t.seed)) continue;
      auto c = chosen.find({cell_of(t), f->second});
      if (c == chosen.end() || c->second != x->second) continue;
      kept.push_back(t);
    }
  }
  const std::vector<TrialValue>& used = best_over ? kept : trials;

  // cell -> level -> seed
  std::map<std::vector<std::string>, std::map<std::string, LevelSeeds, ValueLess>, KeyLess> cells;
  std::set<std::string, ValueLess> levels;
  for (const TrialValue& t : trials) {  // every level, chosen or not
    auto f = t.axes.find(spec.factor);
    if (f != t.axes.end()) levels.insert(f->second);
  }
  // With best_over, a (cell, level) none of whose values qualified still gets its row (no test).
  for (const auto& [key, value] : chosen) cells[key.first][key.second];
  for (const TrialValue& t : used) {
    auto f = t.axes.find(spec.factor);
    if (f == t.axes.end()) continue;
    const std::vector<std::string> cell = cell_of(t);
    cells[cell][f->second][t.seed].Add(t);
  }
  CompareResult out;
  out.optimistic = best_over && select.empty();
  if (!select.empty()) out.test_seeds.assign(test_seeds.begin(), test_seeds.end());
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
      if (best_over) {
        auto c = chosen.find({cell, level});
        auto cb = chosen.find({cell, out.baseline});
        r.best_value = c == chosen.end() ? "" : c->second;
        r.baseline_best_value = cb == chosen.end() ? "" : cb->second;
      }
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
