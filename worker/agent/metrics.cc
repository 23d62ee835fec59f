#include "agent/metrics.h"

#include <httplib.h>
#include <prometheus/text_serializer.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <set>

#include "ablate/token.h"
#include "ablate/metric_catalog.h"

namespace ablate::agent {
namespace {

namespace catalog = ::ablate::metrics;

const catalog::MetricDef& Def(std::string_view name) {
  const catalog::MetricDef* d = catalog::FindMetric(name);
  if (!d) std::abort();  // a name missing from the catalog is a programming error
  return *d;
}

void AddIncrease(prometheus::Counter* c, int64_t now, int64_t last) {
  if (now > last) c->Increment(double(now - last));
}

std::string Slot(const char* kind, int n) { return kind + std::to_string(n); }

MetricsReply Error(int status, const std::string& message) {
  MetricsReply r;
  r.status = status;
  r.content_type = "application/json";
  r.body = nlohmann::json{{"error", message}}.dump() + "\n";
  return r;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// WorkerMetrics
// ---------------------------------------------------------------------------------------------

WorkerMetrics::WorkerMetrics(WorkerMetricsOptions options)
    : options_(std::move(options)), registry_(std::make_shared<prometheus::Registry>()) {
  Gauges(catalog::kWorkerBuildInfo)
      .Add(With({{"version", options_.version.empty() ? "dev" : options_.version}}))
      .Set(1);
  connected_ = &Gauges(catalog::kWorkerConnected).Add(With({}));
  draining_ = &Gauges(catalog::kWorkerDraining).Add(With({}));
  Gauges(catalog::kWorkerCpuSlots).Add(With({})).Set(options_.cpu_slots);
  cpu_slots_busy_ = &Gauges(catalog::kWorkerCpuSlotsBusy).Add(With({}));
  running_ = &Gauges(catalog::kWorkerRunningAttempts).Add(With({}));
  unacked_ = &Gauges(catalog::kWorkerUnackedReports).Add(With({}));
  reconnects_ = &Counters(catalog::kWorkerReconnects).Add(With({}));
  started_ = &Counters(catalog::kWorkerTrialsStarted).Add(With({}));
  spooled_ = &Counters(catalog::kWorkerBatchesSpooled).Add(With({}));
  acked_ = &Counters(catalog::kWorkerBatchesAcked).Add(With({}));
  replayed_ = &Counters(catalog::kWorkerBatchesReplayed).Add(With({}));
  auto& finished = Counters(catalog::kWorkerTrialsFinished);
  for (const auto& o : Agent::Outcomes()) finished_[o] = &finished.Add(With({{"outcome", o}}));
  auto& busy = Gauges(catalog::kWorkerGpuBusy);
  for (const auto& g : options_.gpus) {
    gpu_busy_[g.index()] =
        &busy.Add(With({{"gpu", std::to_string(g.index())}, {"gpu_uuid", g.uuid()}}));
  }
  // prometheus-cpp prints a family only once it has a series (these: while a trial runs).
  tokens_family_ = &Gauges(catalog::kWorkerTokensPerSecond);
  info_family_ = &Gauges(catalog::kWorkerTrialInfo);
}

prometheus::Labels WorkerMetrics::With(prometheus::Labels extra) const {
  extra["worker"] = options_.worker_id;
  return extra;
}

prometheus::Family<prometheus::Gauge>& WorkerMetrics::Gauges(std::string_view name) {
  const auto& d = Def(name);
  return prometheus::BuildGauge()
      .Name(std::string(d.name))
      .Help(std::string(d.help))
      .Register(*registry_);  // the existing family on a second call
}

prometheus::Family<prometheus::Counter>& WorkerMetrics::Counters(std::string_view name) {
  const auto& d = Def(name);
  return prometheus::BuildCounter()
      .Name(std::string(d.name))
      .Help(std::string(d.help))
      .Register(*registry_);
}

void WorkerMetrics::Update(const Agent::MetricsSnapshot& s) {
  std::lock_guard<std::mutex> lock(mu_);
  connected_->Set(s.connected ? 1 : 0);
  draining_->Set(s.draining ? 1 : 0);
  cpu_slots_busy_->Set(s.cpu_slots_busy);
  running_->Set(double(s.running.size()));
  unacked_->Set(double(s.unacked_reports));
  // The first registration is a connect, every later one a reconnect.
  AddIncrease(reconnects_, std::max<int64_t>(0, s.registrations - 1),
              std::max<int64_t>(0, last_.registrations - 1));
  AddIncrease(started_, s.trials_started, last_.trials_started);
  AddIncrease(spooled_, s.batches.batches_spooled, last_.batches.batches_spooled);
  AddIncrease(acked_, s.batches.batches_acked, last_.batches.batches_acked);
  AddIncrease(replayed_, s.batches.batches_replayed, last_.batches.batches_replayed);
  for (const auto& [outcome, counter] : finished_) {
    auto now = s.finished.find(outcome);
    auto last = last_.finished.find(outcome);
    AddIncrease(counter, now == s.finished.end() ? 0 : now->second,
                last == last_.finished.end() ? 0 : last->second);
  }
  last_.registrations = std::max(last_.registrations, s.registrations);
  last_.trials_started = std::max(last_.trials_started, s.trials_started);
  last_.batches.batches_spooled =
      std::max(last_.batches.batches_spooled, s.batches.batches_spooled);
  last_.batches.batches_acked = std::max(last_.batches.batches_acked, s.batches.batches_acked);
  last_.batches.batches_replayed =
      std::max(last_.batches.batches_replayed, s.batches.batches_replayed);
  for (const auto& [outcome, n] : s.finished) {
    last_.finished[outcome] = std::max(last_.finished[outcome], n);
  }

  // Per-GPU busy state, and the running trials' slots.
  std::set<int> busy;
  std::map<std::string, double> tokens;  // slot -> tokens/s
  std::set<std::tuple<std::string, std::string, std::string>> info;
  std::map<int, std::string> uuid;
  for (const auto& g : options_.gpus) uuid[g.index()] = g.uuid();
  for (const auto& r : s.running) {
    const std::string trial = std::to_string(r.trial_id);
    for (int g : r.gpus) {
      busy.insert(g);
      info.insert({trial, Slot("gpu", g), uuid.count(g) ? uuid[g] : ""});
    }
    for (int c : r.cpu_slots) info.insert({trial, Slot("cpu", c), ""});
    std::string first = !r.gpus.empty()
                            ? Slot("gpu", *std::min_element(r.gpus.begin(), r.gpus.end()))
                        : !r.cpu_slots.empty() ? Slot("cpu", r.cpu_slots.front())
                                               : "";
    if (!first.empty()) tokens[first] = std::max(0.0, r.tokens_per_s);
  }
  for (auto& [index, gauge] : gpu_busy_) gauge->Set(busy.count(index) ? 1 : 0);

  auto& tokens_family = *tokens_family_;
  for (auto it = tokens_.begin(); it != tokens_.end();) {
    if (tokens.count(it->first)) {
      ++it;
    } else {
      tokens_family.Remove(it->second);
      it = tokens_.erase(it);
    }
  }
  for (const auto& [slot, value] : tokens) {
    prometheus::Gauge*& g = tokens_[slot];
    if (!g) g = &tokens_family.Add(With({{"slot", slot}}));
    g->Set(value);
  }
  auto& info_family = *info_family_;
  for (auto it = trial_info_.begin(); it != trial_info_.end();) {
    if (info.count(it->first)) {
      ++it;
    } else {
      info_family.Remove(it->second);
      it = trial_info_.erase(it);
    }
  }
  for (const auto& key : info) {
    if (trial_info_.count(key)) continue;
    auto& g = info_family.Add(With(
        {{"trial", std::get<0>(key)}, {"slot", std::get<1>(key)}, {"gpu_uuid", std::get<2>(key)}}));
    g.Set(1);
    trial_info_[key] = &g;
  }
}

std::string WorkerMetrics::Exposition() const {
  std::lock_guard<std::mutex> lock(mu_);
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

// ---------------------------------------------------------------------------------------------
// MetricsEndpoint
// ---------------------------------------------------------------------------------------------

MetricsEndpoint::MetricsEndpoint(std::string token, bool public_metrics,
                                 std::function<std::string()> exposition)
    : token_(std::move(token)), public_(public_metrics), exposition_(std::move(exposition)) {}

MetricsReply MetricsEndpoint::Handle(const std::string& method, const std::string& path,
                                     const std::string& authorization) const {
  if (path != "/metrics") {
    return Error(404, "not found: " + path + " (ablate-worker serves only /metrics)");
  }
  if (method != "GET" && method != "HEAD") {
    MetricsReply r = Error(405, "method " + method + " not allowed: /metrics is read-only (GET)");
    r.headers.push_back({"Allow", "GET, HEAD"});
    return r;
  }
  if (!public_) {
    if (!BearerMatches(authorization, token_)) {
      MetricsReply r = Error(401,
                             "missing or wrong bearer token: send 'Authorization: Bearer <token>' "
                             "(the token in the worker's --token-file), or start the worker with "
                             "--metrics-public");
      r.headers.push_back({"WWW-Authenticate", "Bearer realm=\"ablate-worker\""});
      return r;
    }
  }
  MetricsReply r;
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  r.body = exposition_();
  return r;
}

// ---------------------------------------------------------------------------------------------
// MetricsServer
// ---------------------------------------------------------------------------------------------

MetricsServer::MetricsServer(const MetricsEndpoint* endpoint)
    : endpoint_(endpoint), server_(std::make_unique<httplib::Server>()) {}

MetricsServer::~MetricsServer() { Stop(); }

StatusOr<std::string> MetricsServer::Start(const std::string& host_port) {
  const auto colon = host_port.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return InvalidArgument("--metrics " + host_port + ": expected HOST:PORT (port 0 picks one)");
  }
  std::string host = host_port.substr(0, colon);
  const bool bracketed = host.size() > 2 && host.front() == '[' && host.back() == ']';
  if (bracketed) host = host.substr(1, host.size() - 2);
  const std::string port_text = host_port.substr(colon + 1);
  char* end = nullptr;
  const long port = std::strtol(port_text.c_str(), &end, 10);
  if (port_text.empty() || *end != '\0' || port < 0 || port > 65535) {
    return InvalidArgument("--metrics " + host_port + ": bad port '" + port_text +
                           "' (expected 0..65535)");
  }
  httplib::Server& s = *server_;
  s.new_task_queue = [] { return new httplib::ThreadPool(4); };
  s.set_payload_max_length(4096);
  s.set_read_timeout(5, 0);
  s.set_write_timeout(5, 0);
  auto handle = [this](const httplib::Request& req, httplib::Response& res) {
    const MetricsReply r =
        endpoint_->Handle(req.method, req.path, req.get_header_value("Authorization"));
    res.status = r.status;
    for (const auto& [k, v] : r.headers) res.set_header(k, v);
    res.set_header("Cache-Control", "no-store");
    res.set_header("X-Content-Type-Options", "nosniff");
    res.set_content(r.body, r.content_type);
  };
  s.Get(".*", handle);
  s.Post(".*", handle);
  s.Put(".*", handle);
  s.Delete(".*", handle);
  s.Patch(".*", handle);
  s.Options(".*", handle);
  s.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (res.body.empty()) {
      res.set_content(Error(res.status, "HTTP error " + std::to_string(res.status)).body,
                      "application/json");
    }
  });
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    res.status = 500;
    res.set_content(Error(500, "internal error").body, "application/json");
  });
  const int bound =
      port == 0 ? s.bind_to_any_port(host) : (s.bind_to_port(host, int(port)) ? int(port) : -1);
  if (bound <= 0) {
    return Status(StatusCode::kUnavailable, "--metrics " + host_port +
                                                ": cannot listen there (address in use, or not an "
                                                "address of this host)");
  }
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  // httplib's stop() does nothing until the loop runs: wait for it, so Stop() cannot hang.
  for (int i = 0; i < 5000 && !server_->is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return (bracketed ? "[" + host + "]" : host) + ":" + std::to_string(bound);
}

void MetricsServer::Stop() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace ablate::agent
