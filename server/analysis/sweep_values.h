// The trials of a stored sweep as analysis::Compare takes them (compare.h): each trial's axes, its
// seed (the "seed" axis; "" when the sweep has none), how it ended (succeeded with a finite value,
// diverged, failed or canceled, or still queued / running) and its latest value of `metric`. A
// succeeded trial without the metric counts as failed for it; the distinct builds of its attempts.
// Shared by the RPC and the HTTP API.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "analysis/compare.h"
#include "store/store.h"

namespace ablate::analysis {

StatusOr<std::vector<TrialValue>> SweepValues(server::Store& store, int64_t sweep_id,
                                              const std::string& metric);

}  // namespace ablate::analysis
