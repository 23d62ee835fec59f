// Trial states: the proto's TrialState enum is the one type for them in the coordinator and the
// CLI. Their lowercase names ("queued", "running", ...) are how the store, the JSON API, the
// Prometheus labels and the CLI's tables write them; these functions are the only translation.
#pragma once

#include <optional>
#include <string_view>

#include "proto/ablate.pb.h"

namespace ablate {

// Every state a trial can be in, in lifecycle order (UNSPECIFIED excluded).
inline constexpr v1::TrialState kTrialStates[] = {v1::QUEUED,   v1::RUNNING,  v1::SUCCEEDED,
                                                  v1::FAILED,   v1::DIVERGED, v1::CANCELED,
                                                  v1::STOPPED};

// "queued", "running", "succeeded", "failed", "diverged", "canceled", "stopped"; "unspecified"
// otherwise.
std::string_view TrialStateName(v1::TrialState state);

// The state of a lowercase name; nullopt for anything else (including "unspecified").
std::optional<v1::TrialState> ParseTrialState(std::string_view name);

// Queued or running: the trial still has work to do.
inline bool IsActive(v1::TrialState state) { return state == v1::QUEUED || state == v1::RUNNING; }

}  // namespace ablate
