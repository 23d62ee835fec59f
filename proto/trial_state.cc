#include "proto/trial_state.h"

namespace ablate {

std::string_view TrialStateName(v1::TrialState state) {
  switch (state) {
    case v1::QUEUED:
      return "queued";
    case v1::RUNNING:
      return "running";
    case v1::SUCCEEDED:
      return "succeeded";
    case v1::FAILED:
      return "failed";
    case v1::DIVERGED:
      return "diverged";
    case v1::CANCELED:
      return "canceled";
    case v1::STOPPED:
      return "stopped";
    default:
      return "unspecified";
  }
}

std::optional<v1::TrialState> ParseTrialState(std::string_view name) {
  for (v1::TrialState s : kTrialStates) {
    if (TrialStateName(s) == name) return s;
  }
  return std::nullopt;
}

}  // namespace ablate
