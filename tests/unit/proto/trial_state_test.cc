// proto/trial_state.h: the trial states' names, the one translation between the enum and text.
#include "proto/trial_state.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace ablate {
namespace {

TEST(TrialState, EveryStateRoundTripsThroughItsName) {
  std::set<std::string> names;
  for (v1::TrialState s : kTrialStates) {
    const std::string name(TrialStateName(s));
    names.insert(name);
    EXPECT_EQ(ParseTrialState(name), s) << name;
  }
  EXPECT_EQ(names, (std::set<std::string>{"queued", "running", "succeeded", "failed", "diverged",
                                          "canceled", "stopped"}));
}

TEST(TrialState, UnknownNamesAndUnspecifiedAreRefused) {
  EXPECT_EQ(TrialStateName(v1::TRIAL_STATE_UNSPECIFIED), "unspecified");
  EXPECT_EQ(ParseTrialState("unspecified"), std::nullopt);
  EXPECT_EQ(ParseTrialState("Queued"), std::nullopt);
  EXPECT_EQ(ParseTrialState("lost"), std::nullopt);  // an attempt's state, not a trial's
  EXPECT_EQ(ParseTrialState(""), std::nullopt);
}

TEST(TrialState, OnlyQueuedAndRunningAreActive) {
  for (v1::TrialState s : kTrialStates) {
    EXPECT_EQ(IsActive(s), s == v1::QUEUED || s == v1::RUNNING) << TrialStateName(s);
  }
}

}  // namespace
}  // namespace ablate
