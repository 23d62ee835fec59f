// The HTTP JSON API of ablated (docs/design.md, "Observability" and "Security"): a thin, transport-free
// layer that converts between HTTP requests and the scheduler / store, so it is unit-tested without
// opening a port; http_server.h binds it to cpp-httplib.
//
// Authentication: every /api/ route and /metrics need the coordinator's bearer token, as the header
// `Authorization: Bearer <token>` or the query parameter `?token=<token>` (EventSource cannot set
// headers); otherwise 401 {"error": ...} and nothing is read or changed. /metrics is open with
// ApiOptions::metrics_public. Static files (the dashboard's code, no data) need no token.
//
// Routes (GET only; other methods get 405; every error is JSON {"error": "..."}):
//   /api/sweeps                          sweeps with counts by state, and waiting_reason: why
//                                        no connected worker can take the queued trials ("":
//                                        one can; Scheduler::WaitingReason)
//   /api/sweeps/{id|name}                one sweep (+ axes, spec YAML, progress)
//   /api/sweeps/{id|name}/trials         ?offset=0&limit=100(<=1000)&sort=id&order=asc|desc
//                                        &state=running,failed&axis.<name>=<value>
//                                        sort: id|state|step|loss|val_loss|attempt|started_at|
//                                        finished_at|axis.<name> (NaN/missing last, either order)
//   /api/sweeps                          ?archived=1 includes archived sweeps
//   /api/sweeps/{id|name}/results        ?metric=final_val_loss&by=a,b (or by=a&by=b): per cell
//                                        n, mean, std, se, 95% interval, diverged, failed, builds,
//                                        best (only when separated: analysis/results.h)
//   /api/sweeps/{id|name}/compare        ?factor=K&baseline=V&metric=M&by=a,b: each level of K
//                                        against V, seed by seed (analysis/compare.h);
//                                        &best_over=AXIS[&select_seeds=0,1]: each level at its best
//                                        value of AXIS
//   /api/sweeps/{id|name}/export         ?format=jsonl|csv: one row per trial; &metrics=a,b: the
//                                        long table of those metrics (analysis/export.h)
//   /api/sweeps/{id|name}/decisions      every early-stopping judgment, in the order taken
//                                        (scheduler/early_stop.h)
//   /api/trials/{id}                     config, attempts (with log tails), latest metrics, the
//                                        early-stopping judgments of its configuration
//   /api/trials/{id}/series              ?name=loss&points=500 (2..10000): min/max downsampled
//   /api/workers                         workers with GPUs, running attempts, busy GPUs, and per
//                                        GPU (gpu_load) its trials, share, estimated and used memory
//   /api/metrics/catalog                 the metric catalog (names, types, units, help)
//   /api/events                          server-sent events (served by http_server; see sse.h)
//   /metrics                             Prometheus text exposition
//   anything else                        a static file of the web dir (index.html for "/")
//
// Thread safety: Handle may be called concurrently (the store and the scheduler are thread-safe;
// Api holds only immutable configuration).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ablate/status.h"
#include "metrics/coordinator_metrics.h"
#include "scheduler/scheduler.h"
#include "store/store.h"

namespace ablate::server::http {

struct HttpRequest {
  std::string method = "GET";
  std::string path;  // percent-decoded, without the query string
  std::multimap<std::string, std::string> params;  // decoded query parameters
  std::map<std::string, std::string> headers;      // names lower-case
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
};

struct ApiOptions {
  std::string token;            // required bearer token (empty: refuse every protected route)
  bool metrics_public = false;  // serve /metrics without a token
  std::string web_dir;          // static files; "" = none (404)
};

// ---- Trial listing: pagination, sort, filter (exposed for tests) -----------------------------

struct TrialQuery {
  int64_t offset = 0;
  int64_t limit = 100;
  std::string sort = "id";  // a column or "axis.<name>"
  bool descending = false;
  std::vector<std::string> states;                          // empty: every state
  std::vector<std::pair<std::string, std::string>> axes;    // axis -> value, all must match
};
inline constexpr int64_t kMaxPageSize = 1000;

// Parses the query parameters of /trials. InvalidArgument names the parameter and what is allowed
// (unknown sort column, order not asc|desc, negative offset, limit outside 1..1000, unknown state).
StatusOr<TrialQuery> ParseTrialQuery(const std::multimap<std::string, std::string>& params);

struct TrialPage {
  int64_t total = 0;  // trials matching the filters (before pagination)
  std::vector<TrialStatus> trials;
};
// Filters, sorts (stable; ties by id) and pages `trials`. An axis filter or sort on an axis the
// sweep lacks matches nothing / sorts as missing.
TrialPage ApplyTrialQuery(std::vector<TrialStatus> trials, const TrialQuery& query);

// ---- The API --------------------------------------------------------------------------------

class Api {
 public:
  // `scheduler` and `metrics` may be null (no /api/workers data, no /metrics).
  Api(Store* store, const Scheduler* scheduler, metrics::CoordinatorMetrics* metrics,
      ApiOptions options);

  HttpResponse Handle(const HttpRequest& request) const;
  // True when the request carries the token (header or ?token=). Constant-time comparison.
  bool Authorized(const HttpRequest& request) const;

  Store* store() const { return store_; }

 private:
  HttpResponse Route(const HttpRequest& request) const;
  // The scheduler's reason why no worker can take the sweep's queued trials ("" without one).
  std::string WaitingReason(int64_t sweep_id) const;

  Store* store_;
  const Scheduler* scheduler_;
  metrics::CoordinatorMetrics* metrics_;
  ApiOptions opt_;
};

// {"error": message} with `status`.
HttpResponse JsonError(int status, const std::string& message);
// Status code -> HTTP status (NotFound 404, InvalidArgument 400, PermissionDenied 403, ...).
int HttpStatusFor(const Status& status);

}  // namespace ablate::server::http
