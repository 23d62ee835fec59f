// See sweep_values.h.
#include "analysis/sweep_values.h"

#include <cmath>
#include <map>
#include <set>

namespace ablate::analysis {

StatusOr<std::vector<TrialValue>> SweepValues(server::Store& store, int64_t sweep_id,
                                              const std::string& metric) {
  ABLATE_ASSIGN_OR_RETURN(std::vector<server::TrialStatus> trials, store.GetTrials(sweep_id, {.progress = false, .config_json = false}));
  ABLATE_ASSIGN_OR_RETURN(auto values, store.LatestValues(sweep_id, metric));
  const std::map<int64_t, double> value_of(values.begin(), values.end());
  ABLATE_ASSIGN_OR_RETURN(auto attempts, store.SweepBuilds(sweep_id));
  std::map<int64_t, std::set<std::string>> builds_of;
  for (const auto& a : attempts) {
    if (a.reported()) builds_of[a.trial_id].insert(a.Key());
  }
  std::vector<TrialValue> out;
  out.reserve(trials.size());
  for (const server::TrialStatus& t : trials) {
    TrialValue v;
    for (const auto& [k, val] : t.trial.axes) v.axes[k] = val;
    auto seed = v.axes.find("seed");
    v.seed = seed == v.axes.end() ? "" : seed->second;
    if (auto b = builds_of.find(t.trial.id); b != builds_of.end()) {
      v.builds.assign(b->second.begin(), b->second.end());
    }
    auto it = value_of.find(t.trial.id);
    switch (t.trial.state) {
      case v1::SUCCEEDED:
        if (it != value_of.end() && std::isfinite(it->second)) {
          v.outcome = Outcome::kOk;
          v.value = it->second;
        } else {
          v.outcome = Outcome::kFailed;
        }
        break;
      case v1::DIVERGED:
        v.outcome = Outcome::kDiverged;
        break;
      case v1::FAILED:
        v.outcome = Outcome::kFailed;
        break;
      case v1::CANCELED:
        v.outcome = Outcome::kCanceled;
        break;
      case v1::STOPPED:
        v.outcome = Outcome::kStopped;
        break;
      default:
        v.outcome = Outcome::kMissing;
    }
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace ablate::analysis
