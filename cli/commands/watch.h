// ablate watch SWEEP [--interval SECONDS]
//
// Follows a sweep over the server-streaming Watch RPC until it is finished.
// On a terminal: redraws in place (ANSI cursor-up / clear-line) an overall progress bar with the
// state counts and the ETA, then one line per running trial (small bar, step/total, loss,
// val_loss). Off a terminal: one compact, timestamped line whenever the counts or the progress
// percentage change. Then a summary, with the reason of every failed or canceled trial.
// The ETA comes from the rate of finished steps (every trial's step counts), or of finished trials
// when the trials' step totals are unknown, measured over the last five minutes. When no connected
// worker can take the sweep's queued trials (SweepInfo.waiting_reason: none is connected, or they
// lack the GPUs or CPU slots the trials need), that reason is shown instead of the ETA.
// If the stream breaks after it delivered a snapshot (the coordinator restarted), watch reconnects
// for up to --timeout seconds before giving up with UNAVAILABLE.
// Exit: 0 when every trial succeeded or diverged, 7 (kExitWatchFailures) when some failed or were
// canceled.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "commands/command.h"

namespace ablate::cli {

struct WatchOptions {
  std::string sweep;      // NAME or sweep:ID
  double interval_s = 1;  // how often the server sends a snapshot when nothing changes
};

struct WatchOutcome {
  int succeeded = 0, failed = 0, diverged = 0, canceled = 0, stopped = 0;
  // Diverging and being stopped early by the sweep's rule are results of the experiment;
  // failures and cancellations are not.
  bool all_ok() const { return failed == 0 && canceled == 0; }
};

StatusOr<WatchOutcome> Watch(Client& client, const WatchOptions& options, const Io& io);
void AddWatchCommand(CLI::App& app, Action* selected);

// The pieces, for tests.
struct SweepProgress {
  double done = 0;  // work units done: steps (in_steps) or finished trials
  double total = 0;
  bool in_steps = false;
  int finished_trials = 0;
  int total_trials = 0;
  double fraction() const { return total > 0 ? done / total : 0; }
};
SweepProgress ComputeProgress(const v1::SweepSnapshot& snapshot);

// The terminal frame: a header line (with "waiting" instead of the ETA when the sweep has a
// waiting_reason, given on its own "waiting: ..." line after the counts), a counts line, then the
// running trials as a table (trial,
// bar, step/total, loss, val_loss, worker, axis values; at most `max_trial_lines` rows, then
// "… and K more running"); each line cut to `width` - 1 columns.
std::vector<std::string> WatchFrame(const v1::SweepSnapshot& snapshot, std::optional<double> eta_s,
                                    int width, int max_trial_lines, bool unicode);
// The compact off-terminal line (no timestamp): progress, counts, ETA (or "waiting: <reason>").
std::string WatchLine(const v1::SweepSnapshot& snapshot, std::optional<double> eta_s);

// Turns successive frames into the bytes that overwrite the previous frame in place.
class Redrawer {
 public:
  std::string Draw(const std::vector<std::string>& lines);
  // The cursor is no longer just below the last frame (something else was printed).
  void Forget() { lines_ = 0; }

 private:
  int lines_ = 0;  // lines of the frame on screen
};

}  // namespace ablate::cli
