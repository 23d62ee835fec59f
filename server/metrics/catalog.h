// The one metric catalog (STYLE.md, "One metric catalog"): every series ablate exports to
// Prometheus, with its type, base unit, labels and help text. The Prometheus exporter builds its
// families from this table, the HTTP API serves it (GET /api/metrics/catalog) for the dashboard,
// and deploy/grafana + deploy/prometheus/alerts.yml use these names.
//
// Conventions: prefix ablate_, base units (seconds, bytes), counters end in _total, info gauges in
// _info (value 1). Labels are bounded: sweep names (sweeps are few), states, worker ids, and the
// trial/GPU pairs of running trials only. No per-step or per-trial loss series: those live in SQLite.
//
// Thread safety: the table is immutable.
#pragma once

#include <string_view>
#include <vector>

namespace ablate::server::metrics {

enum class MetricType { kCounter, kGauge, kHistogram };

struct MetricDef {
  std::string_view name;        // full Prometheus name
  MetricType type;
  std::string_view unit;        // base unit ("seconds", "1" for counts and info)
  std::vector<std::string_view> labels;
  std::string_view help;
  std::vector<double> buckets;  // histograms only
};

// Names, for code that refers to one metric.
inline constexpr std::string_view kTrials = "ablate_trials";
inline constexpr std::string_view kWorkers = "ablate_workers";
inline constexpr std::string_view kAssignments = "ablate_assignments_total";
inline constexpr std::string_view kRetries = "ablate_retries_total";
inline constexpr std::string_view kLostAttempts = "ablate_lost_attempts_total";
inline constexpr std::string_view kFencedReports = "ablate_fenced_reports_total";
inline constexpr std::string_view kPointsIngested = "ablate_metric_points_ingested_total";
inline constexpr std::string_view kDuplicateReports = "ablate_duplicate_reports_total";
inline constexpr std::string_view kStoreCommits = "ablate_store_commits_total";
inline constexpr std::string_view kStoreQueueDepth = "ablate_store_queue_depth";
inline constexpr std::string_view kQueueWait = "ablate_queue_wait_seconds";
inline constexpr std::string_view kTrialDuration = "ablate_trial_duration_seconds";
inline constexpr std::string_view kCommitLatency = "ablate_store_commit_duration_seconds";
inline constexpr std::string_view kBuildInfo = "ablate_build_info";
inline constexpr std::string_view kTrialGpuInfo = "ablate_trial_gpu_info";
// The worker's own series (ablate-worker --metrics).
inline constexpr std::string_view kWorkerGpuBusy = "ablate_worker_gpu_busy";
inline constexpr std::string_view kWorkerTokensPerSecond = "ablate_worker_tokens_per_second";

// The whole catalog, coordinator series first.
const std::vector<MetricDef>& Catalog();
// The entry named `name`; nullptr when there is none.
const MetricDef* FindMetric(std::string_view name);
const char* MetricTypeName(MetricType type);  // "counter" | "gauge" | "histogram"

}  // namespace ablate::server::metrics
