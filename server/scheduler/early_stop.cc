#include "scheduler/early_stop.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

namespace ablate::server {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// a is better than b under the rule's mode; NaN is worse than any number.
bool Better(const EarlyStopRule& r, double a, double b) {
  if (std::isnan(a)) return false;
  if (std::isnan(b)) return true;
  return r.minimize ? a < b : a > b;
}

struct Outcome {
  double threshold = kNaN;
  bool stop = false;
};

// The rule applied to `value` against the values recorded at the rung before it (in order).
Outcome Apply(const EarlyStopRule& r, const std::vector<double>& before, double value) {
  Outcome o;
  if (r.rule == "asha") {
    std::vector<double> all = before;
    all.push_back(value);
    std::sort(all.begin(), all.end(), [&](double a, double b) { return Better(r, a, b); });
    const size_t k = std::max<size_t>(
        1, static_cast<size_t>(std::ceil(double(all.size()) / r.reduction - 1e-12)));
    o.threshold = all[k - 1];
    o.stop = Better(r, o.threshold, value) || (std::isnan(value) && !std::isnan(o.threshold));
    return o;
  }
  // median
  if (static_cast<int>(before.size()) < r.min_configs) {
    o.stop = std::isnan(value) && !before.empty();
    return o;
  }
  std::vector<double> v = before;
  std::sort(v.begin(), v.end(), [&](double a, double b) { return Better(r, a, b); });
  const size_t n = v.size();
  o.threshold = n % 2 ? v[n / 2] : (std::isnan(v[n / 2]) ? v[n / 2 - 1] : (v[n / 2 - 1] + v[n / 2]) / 2);
  o.stop = Better(r, o.threshold, value);
  return o;
}

double Mean(const std::vector<double>& v) {
  if (v.empty()) return kNaN;
  double s = 0;
  for (double x : v) s += x;
  return s / double(v.size());
}

bool SameNumber(double a, double b) {
  return (std::isnan(a) && std::isnan(b)) || a == b ||
         std::fabs(a - b) <= 1e-12 * std::max(std::fabs(a), std::fabs(b));
}

}  // namespace

EarlyStopper::EarlyStopper(int64_t sweep_id, EarlyStopRule rule)
    : sweep_id_(sweep_id), rule_(std::move(rule)), rungs_(rule_.RungSteps()) {}

std::string EarlyStopper::ConfigKey(const std::vector<std::pair<std::string, std::string>>& axes,
                                    int64_t trial_id) const {
  std::string out;
  for (const auto& [k, v] : axes) {
    if (k == "seed" && !rule_.per_trial) continue;
    out += (out.empty() ? "" : ", ") + k + "=" + v;
  }
  if (out.empty()) out = rule_.per_trial ? "trial " + std::to_string(trial_id) : "(base)";
  return out;
}

std::string EarlyStopper::GroupKey(
    const std::vector<std::pair<std::string, std::string>>& axes) const {
  std::string out;
  for (const std::string& f : rule_.factors) {
    for (const auto& [k, v] : axes) {
      if (k == f) out += (out.empty() ? "" : ", ") + k + "=" + v;
    }
  }
  return out;
}

void EarlyStopper::AddTrial(int64_t trial_id,
                            const std::vector<std::pair<std::string, std::string>>& axes,
                            bool ended, bool exempt) {
  if (trials_.count(trial_id)) return;
  Trial& t = trials_[trial_id];
  t.config = ConfigKey(axes, trial_id);
  t.ended = ended;
  Config& c = configs_[t.config];
  c.group = GroupKey(axes);
  c.trials.push_back(trial_id);
  c.exempt = c.exempt || exempt;
}

void EarlyStopper::SetExempt(int64_t trial_id) {
  auto it = trials_.find(trial_id);
  if (it != trials_.end()) configs_[it->second.config].exempt = true;
}

void EarlyStopper::Restore(const StopDecisionRecord& d) {
  if (d.rung < 0) return;
  records_[{d.group, size_t(d.rung)}].push_back({d.config, d.value});
  auto it = configs_.find(d.config);
  if (it == configs_.end()) return;
  it->second.next_rung = std::max(it->second.next_rung, size_t(d.rung) + 1);
  if (d.decision == "stop") it->second.stopped = true;
}

bool EarlyStopper::Stopped(int64_t trial_id) const {
  auto it = trials_.find(trial_id);
  if (it == trials_.end()) return false;
  auto c = configs_.find(it->second.config);
  return c != configs_.end() && c->second.stopped;
}

std::vector<StopDecisionRecord> EarlyStopper::OnPoint(int64_t trial_id, int64_t step,
                                                      const std::string& name, double value) {
  std::vector<StopDecisionRecord> out;
  if (name != rule_.metric) return out;
  auto it = trials_.find(trial_id);
  if (it == trials_.end()) return out;
  Trial& t = it->second;
  Config& c = configs_[t.config];
  if (c.stopped || c.done || c.exempt) return out;
  // The first value at or after each rung's step (a resumed attempt may repeat steps: the first
  // stored one counts).
  for (size_t r = c.next_rung; r < rungs_.size(); ++r) {
    if (step >= rungs_[r] && !t.at_rung.count(int(r))) t.at_rung[int(r)] = value;
  }
  t.last_step = std::max(t.last_step, step);
  Judge(t.config, &out);
  return out;
}

std::vector<StopDecisionRecord> EarlyStopper::OnTrialEnded(int64_t trial_id) {
  std::vector<StopDecisionRecord> out;
  auto it = trials_.find(trial_id);
  if (it == trials_.end() || it->second.ended) return out;
  it->second.ended = true;
  Judge(it->second.config, &out);
  return out;
}

void EarlyStopper::Judge(const std::string& config, std::vector<StopDecisionRecord>* out) {
  Config& c = configs_[config];
  while (!c.stopped && !c.done && !c.exempt && c.next_rung < rungs_.size()) {
    const size_t r = c.next_rung;
    std::vector<double> values;
    bool ready = true;
    for (int64_t id : c.trials) {
      const Trial& t = trials_[id];
      auto v = t.at_rung.find(int(r));
      if (v != t.at_rung.end()) {
        values.push_back(v->second);
      } else if (!t.ended) {
        ready = false;
        break;
      }
    }
    if (!ready) return;
    if (values.empty()) {
      c.done = true;  // every seed ended before this rung
      return;
    }
    out->push_back(Decide(config, c, r, Mean(values), values));
    c.next_rung = r + 1;
  }
}

StopDecisionRecord EarlyStopper::Decide(const std::string& config, Config& c, size_t rung,
                                        double value, std::vector<double> seed_values) {
  auto& record = records_[{c.group, rung}];
  std::vector<double> before;
  for (const auto& [name, v] : record) before.push_back(v);
  const Outcome o = Apply(rule_, before, value);
  record.push_back({config, value});
  StopDecisionRecord d;
  d.sweep_id = sweep_id_;
  d.rule = rule_.rule;
  d.metric = rule_.metric;
  d.rung = static_cast<int>(rung);
  d.step = rungs_[rung];
  d.config = config;
  d.group = c.group;
  d.trial_ids = c.trials;
  d.value = value;
  d.seed_values = std::move(seed_values);
  d.compared = record;
  d.threshold = o.threshold;
  d.decision = o.stop ? "stop" : "continue";
  if (o.stop) c.stopped = true;
  return d;
}

std::vector<std::string> ReplayDecisions(
    const EarlyStopRule& rule, const std::vector<StopDecisionRecord>& decisions,
    const std::map<int64_t, std::vector<std::pair<int64_t, double>>>& series) {
  std::vector<std::string> out;
  std::map<std::pair<std::string, int>, std::vector<std::pair<std::string, double>>> records;
  const std::vector<int64_t> rungs = rule.RungSteps();
  auto fail = [&](const StopDecisionRecord& d, const std::string& what) {
    std::ostringstream os;
    os << "decision " << d.id << " (" << d.config << " at rung " << d.rung << "): " << what;
    out.push_back(os.str());
  };
  for (const StopDecisionRecord& d : decisions) {
    if (d.rung < 0 || size_t(d.rung) >= rungs.size() || rungs[d.rung] != d.step) {
      fail(d, "rung " + std::to_string(d.rung) + " at step " + std::to_string(d.step) +
                  " is not a rung of the rule");
      continue;
    }
    // The value: each trial's first stored point at or after the rung's step.
    std::vector<double> values;
    for (int64_t id : d.trial_ids) {
      auto s = series.find(id);
      if (s == series.end()) continue;
      for (const auto& [step, v] : s->second) {
        if (step >= d.step) {
          values.push_back(v);
          break;
        }
      }
    }
    std::ostringstream vs;
    vs.precision(17);
    if (values.size() != d.seed_values.size()) {
      vs << "stored " << d.seed_values.size() << " seed values, the metrics have "
         << values.size() << " at the rung";
      fail(d, vs.str());
    } else {
      for (size_t i = 0; i < values.size(); ++i) {
        if (!SameNumber(values[i], d.seed_values[i])) {
          vs << "seed value " << i << " stored " << d.seed_values[i] << ", the metrics say "
             << values[i];
          fail(d, vs.str());
          break;
        }
      }
    }
    auto& record = records[{d.group, d.rung}];
    std::vector<double> before;
    for (const auto& [name, v] : record) before.push_back(v);
    const Outcome o = Apply(rule, before, Mean(d.seed_values));
    record.push_back({d.config, d.value});
    const std::string replayed = o.stop ? "stop" : "continue";
    if (replayed != d.decision) fail(d, "stored " + d.decision + ", replayed " + replayed);
    if (!SameNumber(o.threshold, d.threshold)) {
      std::ostringstream ts;
      ts.precision(17);
      ts << "stored threshold " << d.threshold << ", replayed " << o.threshold;
      fail(d, ts.str());
    }
    bool same = record.size() == d.compared.size();
    for (size_t i = 0; same && i < record.size(); ++i) {
      same = record[i].first == d.compared[i].first &&
             SameNumber(record[i].second, d.compared[i].second);
    }
    if (!same) fail(d, "the compared values differ from the stored ones");
  }
  return out;
}

}  // namespace ablate::server
