// ablate-worker's Prometheus endpoint (`--metrics HOST:PORT`; docs/design.md, "Observability").
//
// Three layers, so each is tested without the next:
// - WorkerMetrics: the ablate_worker_* series of the one metric catalog (server/metrics/catalog.h:
//   names, types, help texts) on a prometheus-cpp registry, updated from Agent::MetricsSnapshot.
//   The endpoint calls Update() on every scrape, so nothing is staler than the scrape itself.
//   Agent counters become Prometheus counters by adding their increase since the previous Update.
//   Per-trial series (tokens per second, trial info) exist only while the trial's trainer runs and
//   are labelled by slot ("gpu<N>" = the trial's first GPU, "cpu<N>" = its first CPU slot), so
//   their number stays bounded by the node's GPUs and slots; the trial id is in the info gauge.
// - MetricsEndpoint: the HTTP semantics, transport-free. GET/HEAD /metrics returns the text
//   exposition (format 0.0.4); it needs `Authorization: Bearer <token>` (the worker's --token-file
//   token, compared in constant time) unless built with public_metrics (`--metrics-public`).
//   401 for a missing or wrong token, 404 for any other path, 405 for other methods; errors are
//   JSON {"error": ...} like ablated's.
// - MetricsServer: a cpp-httplib listener for the endpoint (a few threads; requests over 4 KiB are
//   refused).
//
// Thread safety: WorkerMetrics and MetricsEndpoint may be used from any thread (WorkerMetrics
// serialises on its own mutex). MetricsServer: Start and Stop from one thread.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "ablate/status.h"
#include "agent/agent.h"
#include "proto/ablate.pb.h"

namespace httplib {
class Server;
}

namespace ablate::agent {

struct WorkerMetricsOptions {
  std::string worker_id;          // the label `worker` of every series
  std::string version;            // ablate_worker_build_info{version}
  std::vector<v1::GpuInfo> gpus;  // one ablate_worker_gpu_busy series each
  int cpu_slots = 0;
};

class WorkerMetrics {
 public:
  explicit WorkerMetrics(WorkerMetricsOptions options);

  void Update(const Agent::MetricsSnapshot& s);
  // Prometheus text exposition (format 0.0.4) of every series.
  std::string Exposition() const;

 private:
  prometheus::Family<prometheus::Gauge>& Gauges(std::string_view name);
  prometheus::Family<prometheus::Counter>& Counters(std::string_view name);
  prometheus::Labels With(prometheus::Labels extra) const;

  const WorkerMetricsOptions options_;
  std::shared_ptr<prometheus::Registry> registry_;

  mutable std::mutex mu_;
  // Series that always exist (owned by registry_).
  prometheus::Gauge* connected_;
  prometheus::Gauge* draining_;
  prometheus::Gauge* cpu_slots_busy_;
  prometheus::Gauge* running_;
  prometheus::Gauge* unacked_;
  prometheus::Counter* reconnects_;
  prometheus::Counter* started_;
  prometheus::Counter* spooled_;
  prometheus::Counter* acked_;
  prometheus::Counter* replayed_;
  std::map<std::string, prometheus::Counter*> finished_;  // by outcome
  std::map<int, prometheus::Gauge*> gpu_busy_;            // by GPU index
  prometheus::Family<prometheus::Gauge>* tokens_family_;
  prometheus::Family<prometheus::Gauge>* info_family_;
  // Series of running trials, removed when the trial ends. GUARDED_BY(mu_).
  std::map<std::string, prometheus::Gauge*> tokens_;  // by slot
  std::map<std::tuple<std::string, std::string, std::string>, prometheus::Gauge*>
      trial_info_;               // (trial, slot, gpu_uuid)
  Agent::MetricsSnapshot last_;  // GUARDED_BY(mu_): counter values already added
};

struct MetricsReply {
  int status = 200;
  std::string content_type;
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra response headers
};

class MetricsEndpoint {
 public:
  // `exposition` produces the body of an authorised GET /metrics (called on a server thread).
  // An empty token with public_metrics false refuses every scrape.
  MetricsEndpoint(std::string token, bool public_metrics, std::function<std::string()> exposition);

  // `authorization`: the request's Authorization header, "" when absent.
  MetricsReply Handle(const std::string& method, const std::string& path,
                      const std::string& authorization) const;

 private:
  const std::string token_;
  const bool public_;
  const std::function<std::string()> exposition_;
};

class MetricsServer {
 public:
  explicit MetricsServer(const MetricsEndpoint* endpoint);  // not owned; must outlive the server
  ~MetricsServer();                                         // Stop()
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // Listens on "HOST:PORT" (IPv6 as [ADDR]:PORT; port 0 picks a free one) and serves on a
  // background thread. Returns the bound address as HOST:PORT. Errors: InvalidArgument (malformed
  // address), Unavailable (cannot bind).
  StatusOr<std::string> Start(const std::string& host_port);
  // Stops accepting and joins the serving thread. Idempotent.
  void Stop();

 private:
  const MetricsEndpoint* const endpoint_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
};

}  // namespace ablate::agent
