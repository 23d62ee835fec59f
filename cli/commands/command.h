// What every subcommand shares: how it is registered with the command line, what it runs with, and
// the argument conventions (sweep and trial references, --format).
//
// Each subcommand lives in its own file (commands/<name>.{h,cc}) with an options struct, a library
// function that does the work against a Client (tested directly), and an Add<Name>Command that
// registers the subcommand with CLI11 and, when the command line selects it, stores the action to
// run. app.cc runs the action and turns its Status into the exit code (exit_codes.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "ablate/status.h"
#include "client.h"
#include "io.h"
#include "proto/ablate.pb.h"
#include "proto/trial_state.h"
#include "render/table.h"

namespace CLI {
class App;
}  // namespace CLI

namespace ablate::cli {

struct CommandEnv {
  Io io;
  // Connects on first use (reads the token file); errors carry the exit code's status code.
  std::function<StatusOr<Client*>()> client;
  // A command may end with an OK status and a non-zero exit code (watch: kExitWatchFailures).
  int exit_code = 0;
};

using Action = std::function<Status(CommandEnv&)>;

// Adds `--format table|json|csv` (default table) to a listing subcommand; a bad value is a usage
// error (exit 2).
void AddFormatOption(CLI::App* sub, std::string* format);

// A reference to a sweep or a trial on the command line: a bare integer or "trial:ID" is a trial,
// "sweep:ID" is a sweep by id, anything else a sweep name.
struct Target {
  bool is_trial = false;
  int64_t trial_id = 0;
  std::string sweep;  // name or numeric id, as GetSweepRequest.sweep takes it
};
StatusOr<Target> ParseTarget(std::string_view arg);
// An argument that must name a sweep ("NAME" or "sweep:ID"); InvalidArgument for a trial reference.
StatusOr<std::string> ParseSweepRef(std::string_view arg);
// An argument that must name a trial (a positive integer or "trial:ID").
StatusOr<int64_t> ParseTrialRef(std::string_view arg);

// The state counts of a sweep, by SweepInfo.counts (absent: 0).
int StateCount(const v1::SweepInfo& sweep, const std::string& state);
// Trials that are no longer queued or running.
int FinishedCount(const v1::SweepInfo& sweep);
// A loss for display: 4 decimals; NaN (none yet) shows "-".
inline Cell LossCell(double v) { return Cell::Real(v, 4); }
// A unix time as a cell: null when 0 (never).
inline Cell TimeCell(double unix_s) { return unix_s > 0 ? Cell::Real(unix_s, 0) : Cell(); }

}  // namespace ablate::cli
