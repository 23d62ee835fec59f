// See identity.h.
#include "sweep/identity.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

namespace ablate::server {

namespace {

using Json = nlohmann::json;
using AxisKey = std::map<std::string, std::string>;

// Dotted key -> value text of every leaf of a config (arrays as their JSON text).
void Flatten(const Json& j, const std::string& prefix, std::map<std::string, std::string>* out) {
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      Flatten(*it, prefix.empty() ? it.key() : prefix + "." + it.key(), out);
    }
    return;
  }
  (*out)[prefix] = j.is_string() ? j.get<std::string>() : j.dump();
}

std::map<std::string, std::string> FlatConfig(const std::string& text) {
  std::map<std::string, std::string> out;
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_discarded()) Flatten(j, "", &out);
  out.erase("name");  // a label, not part of the config's identity
  return out;
}

std::string PointText(const AxisKey& key) {
  std::string s;
  for (const auto& [k, v] : key) s += (s.empty() ? "" : ", ") + k + "=" + v;
  return s.empty() ? "(the base point)" : s;
}

}  // namespace

SweepDiff DiffSweep(const std::vector<std::string>& stored_axes,
                    const std::vector<StoredTrial>& stored, const ExpandedSweep& next) {
  SweepDiff d;
  {
    std::set<std::string> before(stored_axes.begin(), stored_axes.end());
    std::set<std::string> after(next.axes.begin(), next.axes.end());
    for (const auto& a : after) {
      if (!before.count(a)) d.changes.push_back("axis added: " + a);
    }
    for (const auto& a : before) {
      if (!after.count(a)) d.changes.push_back("axis removed: " + a);
    }
  }
  const bool axes_changed = !d.changes.empty();
  std::map<AxisKey, const StoredTrial*> by_point;
  std::set<std::string> hashes;
  for (const StoredTrial& t : stored) {
    by_point[AxisKey(t.axes.begin(), t.axes.end())] = &t;
    hashes.insert(t.config_hash);
  }
  // key -> (old value, new value, trials): the first example of each changed key.
  struct KeyChange {
    std::string before, after;
    int trials = 0;
  };
  std::map<std::string, KeyChange> keys;
  std::set<AxisKey> seen;
  for (const ExpandedTrial& t : next.trials) {
    AxisKey key(t.axes.begin(), t.axes.end());
    seen.insert(key);
    auto it = by_point.find(key);
    if (it == by_point.end()) {
      const bool same = hashes.count(t.config_hash) > 0;
      d.plan.push_back(same ? TrialPlan::kExisting : TrialPlan::kNew);
      ++(same ? d.existing : d.new_trials);
      continue;
    }
    if (it->second->config_hash == t.config_hash) {
      d.plan.push_back(TrialPlan::kExisting);
      ++d.existing;
      continue;
    }
    d.plan.push_back(TrialPlan::kChanged);
    ++d.changed;
    const auto a = FlatConfig(it->second->config_json), b = FlatConfig(t.config_json);
    std::set<std::string> names;
    for (const auto& [k, v] : a) names.insert(k);
    for (const auto& [k, v] : b) names.insert(k);
    for (const auto& k : names) {
      auto x = a.find(k), y = b.find(k);
      const std::string before = x == a.end() ? "(absent)" : x->second;
      const std::string after = y == b.end() ? "(absent)" : y->second;
      if (before == after) continue;
      KeyChange& c = keys[k];
      if (c.trials++ == 0) c.before = before, c.after = after;
    }
  }
  for (const auto& [k, c] : keys) {
    d.changes.push_back(k + ": " + c.before + " -> " + c.after + " (" + std::to_string(c.trials) +
                        " trial" + (c.trials == 1 ? "" : "s") + ")");
  }
  std::string example;
  for (const auto& [key, t] : by_point) {
    if (seen.count(key)) continue;
    if (d.removed++ == 0) example = PointText(key);
  }
  // When the axes changed, no point matches: the axis change is the reason, not each point.
  if (d.removed > 0 && !axes_changed) {
    d.changes.push_back(std::to_string(d.removed) + " trial" + (d.removed == 1 ? "" : "s") +
                        " of the sweep not in the new spec (e.g. " + example + ")");
  }
  return d;
}

std::string NextVersionName(const std::string& name, const std::vector<std::string>& taken) {
  const std::set<std::string> t(taken.begin(), taken.end());
  for (int n = 2;; ++n) {
    std::string candidate = name + ".v" + std::to_string(n);
    if (!t.count(candidate)) return candidate;
  }
}

}  // namespace ablate::server
