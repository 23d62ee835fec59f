// Sweep identity: may a spec be submitted again under a stored sweep's name?
//
// A sweep is its trials. Resubmitting may ADD trials (more seeds, more values of an axis, an
// exclude entry removed) and change how it runs (priority, max_attempts); anything that would make
// the stored trials no longer what the spec describes is a change of definition, and refused:
//   - an axis added or removed;
//   - a grid point of the sweep whose config differs (the base changed, e.g. train.steps 150 ->
//     200, or resources), listed key by key with the old and new value;
//   - a grid point of the sweep that the new spec no longer has (a value or seed removed, an
//     exclude entry added).
// The caller then refuses the submit (nothing is written) unless the user asks for a new version
// of the sweep (a new sweep named NAME.v2, NAME.v3, ...).
// Thread safety: pure functions.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "sweep/sweep.h"

namespace ablate::server {

// A stored trial as the comparison needs it.
struct StoredTrial {
  std::vector<std::pair<std::string, std::string>> axes;
  std::string config_hash;
  std::string config_json;
};

enum class TrialPlan { kNew, kExisting, kChanged };

struct SweepDiff {
  std::vector<TrialPlan> plan;       // per trial of the new expansion, in its order
  std::vector<std::string> changes;  // empty: the submit only adds; else why it is refused
  int new_trials = 0, existing = 0, changed = 0, removed = 0;
};

SweepDiff DiffSweep(const std::vector<std::string>& stored_axes,
                    const std::vector<StoredTrial>& stored, const ExpandedSweep& next);

// "NAME.vN" for the smallest N >= 2 that `taken` does not hold.
std::string NextVersionName(const std::string& name, const std::vector<std::string>& taken);

}  // namespace ablate::server
