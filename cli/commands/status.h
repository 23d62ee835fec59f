// ablate status [SWEEP | trial:ID] [--format table|json|csv]
//
// No argument: every sweep with its state counts and progress. SWEEP (a name or sweep:ID): its
// trials, one row each: id, one column per axis, state, attempt, worker, step/total, loss,
// val_loss, reason. trial:ID: one trial's state, attempts and latest metrics.
// A sweep whose queued trials no connected worker can take (SweepInfo.waiting_reason) says why:
// a "waiting: ..." line under the sweep's header (SWEEP), a "sweep NAME is waiting: ..." line
// under the table and the waiting_reason field of the JSON and CSV formats (no argument).
#pragma once

#include <optional>
#include <string>

#include "commands/command.h"

namespace ablate::cli {

struct StatusOptions {
  std::optional<std::string> target;  // as typed: NAME, sweep:ID or trial:ID
  Format format = Format::kTable;
  bool archived = false;  // the listing includes archived sweeps (marked)
  bool decisions = false;  // SWEEP --decisions: its early-stopping judgments instead of its trials
};

// Early-stopping judgments, one row each (the sweep's, or those of one trial).
Table DecisionsTable(const google::protobuf::RepeatedPtrField<v1::StopDecision>& decisions);

Status ShowStatus(Client& client, const StatusOptions& options, const Io& io);
void AddStatusCommand(CLI::App& app, Action* selected);

// The renderers, for tests.
Table SweepsTable(const v1::ListSweepsResponse& resp, bool show_archived = false);
Table TrialsTable(const v1::SweepInfo& sweep,
                  const google::protobuf::RepeatedPtrField<v1::TrialSummary>& trials);

}  // namespace ablate::cli
