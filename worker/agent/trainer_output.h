// What the agent makes of one line of ablate-train's stdout (README.md, "Output").
//
// Every numeric field of a JSON line becomes a metric point, except "step" (it is the point's step)
// and "type": name = field name, step = the line's "step", or 0 when the line has none ("start").
// Booleans, strings, nulls (NaN/Inf are printed as null) and nested values are not points.
// A "start" line may carry the trainer's build ({"version", "commit", "numerics"} strings).
// A "checkpoint" line also names a checkpoint (path, step); a "final" line carries the run's status
// ("ok" / "diverged") and, when diverged, a reason. Anything that is not a JSON object is reported
// as not JSON so the caller can count it; the line is otherwise ignored.
// Thread safety: a pure function.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "proto/ablate.pb.h"

namespace ablate::agent {

struct TrainerLine {
  bool is_json = false;  // false: not a JSON object; every other field is empty
  std::string type;      // "start", "step", "eval", "diagnostics", "checkpoint", "final", or ""
  int64_t step = 0;
  std::vector<v1::MetricPoint> points;
  std::optional<std::string> checkpoint_path;  // type "checkpoint" with a string "path"
  std::optional<std::string> final_status;     // type "final": its "status"
  std::string final_reason;                    // type "final": its "reason" (diverged), or ""
  std::optional<v1::BuildInfo> build;          // type "start" with a "build" object: its strings
};

TrainerLine ParseTrainerLine(std::string_view line);

}  // namespace ablate::agent
