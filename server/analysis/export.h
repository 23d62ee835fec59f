// A sweep's data as researchers take it out (`ablate export`, GET /api/sweeps/NAME/export, the
// Python package): a wide table, one row per trial, or a long table of metric points.
//
// Wide columns, in order: trial_id, state, attempt (attempts made), seed (the seed axis, else the
// config's seed), build_version, build_commit, numerics_version (of the trial's latest attempt that
// reported one), builds (distinct builds over the trial's attempts), tags, note, then every axis of
// the sweep under its dotted key (spec order, seed excluded), then the latest value of every metric
// any trial reported, under the trainer's own name (e.g. final_val_loss), sorted by name.
// Long columns: trial_id, step, tokens (the trainer's `tokens` at that step; null when it did not
// report it), name, value.
//
// Values are JSON: axis values typed as the spec gave them (a number, a bool or a string), NaN and
// missing metrics null. CSV (RFC 4180: quoted when needed, "" inside quotes) writes null as an empty
// field, tags joined by ';'. JSON lines: one object per row, keys in column order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ablate/status.h"
#include "store/store.h"

namespace ablate::analysis {

struct Table {
  std::vector<std::string> columns;
  std::vector<std::vector<nlohmann::json>> rows;  // each row has columns.size() values
};

// One row per trial, by trial id. Errors: NotFound (no such sweep).
StatusOr<Table> ExportTrials(server::Store& store, int64_t sweep_id);
// The points of `metrics` (non-empty) of every trial. Errors: NotFound, InvalidArgument (no names).
StatusOr<Table> ExportSeries(server::Store& store, int64_t sweep_id,
                             const std::vector<std::string>& metrics);

enum class ExportFormat { kCsv, kJsonl };
// "csv" | "jsonl"; InvalidArgument otherwise.
StatusOr<ExportFormat> ParseExportFormat(const std::string& name);
std::string Render(const Table& table, ExportFormat format);

// The axis value text as stored (ablate/axis_value.h's canonical text) as the JSON scalar it
// spelled: "0.01" -> 0.01, "true" -> true, "fpa" -> "fpa".
nlohmann::json TypedAxisValue(const std::string& text);

}  // namespace ablate::analysis
