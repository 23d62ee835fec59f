// ablate-worker's Prometheus endpoint (agent/metrics.h): the series built from agent snapshots
// (parsed back from the text exposition and checked against the metric catalog), the endpoint's
// HTTP semantics (401 without the token, 404, 405, --metrics-public), the listener over a real
// socket, and the agent's snapshot while a (fake) trainer runs. `promtool check metrics` lints the
// exposition when Debian's prometheus package is installed.
#include "agent/metrics.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <future>

#include "fake_coordinator.h"
#include "ablate/metric_catalog.h"
#include "test_util.h"

namespace ablate::agent {
namespace {

namespace catalog = ::ablate::metrics;
using testing::kToken;

// The text exposition format, parsed back: HELP and TYPE per family, samples with their labels.
struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = NAN;
};
struct Exposition {
  std::map<std::string, std::string> help, type;
  std::vector<Sample> samples;

  // The value of the only sample of `name` whose labels include `labels`; NaN when there is none,
  // and a test failure when there are several.
  double Value(const std::string& name,
               const std::map<std::string, std::string>& labels = {}) const {
    double v = NAN;
    int n = 0;
    for (const auto& s : samples) {
      if (s.name != name) continue;
      bool match = true;
      for (const auto& [k, val] : labels) {
        auto it = s.labels.find(k);
        match = match && it != s.labels.end() && it->second == val;
      }
      if (match) v = s.value, ++n;
    }
    EXPECT_LE(n, 1) << name;
    return v;
  }
  int Count(const std::string& name) const {
    int n = 0;
    for (const auto& s : samples) n += s.name == name ? 1 : 0;
    return n;
  }
};

Exposition Parse(const std::string& text) {
  Exposition e;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) {
      const size_t sp = line.find(' ', 7);
      EXPECT_NE(sp, std::string::npos) << line;
      auto& m = line[2] == 'H' ? e.help : e.type;
      m[line.substr(7, sp - 7)] = line.substr(sp + 1);
      continue;
    }
    EXPECT_NE(line[0], '#') << "unexpected comment: " << line;
    Sample s;
    size_t i = line.find_first_of("{ ");
    s.name = line.substr(0, i);
    if (i != std::string::npos && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        const size_t eq = line.find('=', i);
        const std::string key = line.substr(i, eq - i);
        EXPECT_EQ(line[eq + 1], '"') << line;
        std::string value;
        size_t j = eq + 2;
        for (; j < line.size() && line[j] != '"'; ++j) {
          if (line[j] == '\\' && j + 1 < line.size()) ++j;
          value += line[j];
        }
        s.labels[key] = value;
        i = j + 1;
        if (i < line.size() && line[i] == ',') ++i;
      }
      i = line.find(' ', i);
    }
    s.value = std::stod(line.substr(i + 1));
    e.samples.push_back(std::move(s));
  }
  return e;
}

WorkerMetricsOptions TwoGpusTwoSlots() {
  WorkerMetricsOptions o;
  o.worker_id = "node-a-1f2e3d";
  o.version = "9.8.7";
  o.cpu_slots = 2;
  o.gpus.resize(2);
  for (int i = 0; i < 2; ++i) {
    o.gpus[i].set_index(i);
    o.gpus[i].set_uuid("GPU-fake-" + std::to_string(i));
  }
  return o;
}

Agent::MetricsSnapshot::Running RunningTrial(int64_t trial, std::vector<int> gpus,
                                             std::vector<int> slots, double tokens) {
  Agent::MetricsSnapshot::Running r;
  r.trial_id = trial;
  r.attempt = 1;
  r.gpus = std::move(gpus);
  r.cpu_slots = std::move(slots);
  r.tokens_per_s = tokens;
  return r;
}

TEST(WorkerMetrics, EverySeriesIsInTheCatalogWithItsTypeAndHelp) {
  WorkerMetrics m(TwoGpusTwoSlots());
  Agent::MetricsSnapshot s;
  s.running.push_back(RunningTrial(41, {1}, {}, 2500));
  s.running.push_back(RunningTrial(42, {}, {0}, 300));
  m.Update(s);
  const std::string text = m.Exposition();
  const Exposition e = Parse(text);
  // Every worker series of the catalog is exposed with the catalog's help and type...
  int worker_series = 0;
  for (const auto& def : catalog::Catalog()) {
    const std::string name(def.name);
    if (name.rfind("ablate_worker_", 0) != 0) continue;
    ++worker_series;
    ASSERT_TRUE(e.type.count(name)) << name << " missing from\n" << text;
    EXPECT_EQ(e.type.at(name), catalog::MetricTypeName(def.type)) << name;
    EXPECT_EQ(e.help.at(name), std::string(def.help)) << name;
  }
  EXPECT_EQ(worker_series, 16);
  // ...and every sample is a catalog series with only the catalog's labels, `worker` always set.
  for (const auto& smp : e.samples) {
    const catalog::MetricDef* def = catalog::FindMetric(smp.name);
    ASSERT_NE(def, nullptr) << smp.name;
    EXPECT_EQ(smp.name.rfind("ablate_worker_", 0), 0u) << smp.name;
    for (const auto& [k, v] : smp.labels) {
      EXPECT_NE(std::find(def->labels.begin(), def->labels.end(), k), def->labels.end())
          << smp.name << " has label " << k << " outside the catalog";
    }
    EXPECT_EQ(smp.labels.at("worker"), "node-a-1f2e3d") << smp.name;
  }
}

TEST(WorkerMetrics, ValuesFollowTheAgentAndTrialSeriesEndWithTheirTrial) {
  WorkerMetrics m(TwoGpusTwoSlots());
  Agent::MetricsSnapshot s;
  s.connected = true;
  s.registrations = 1;
  s.trials_started = 3;
  s.finished = {{"succeeded", 1}};
  s.batches = {10, 8, 0};
  s.unacked_reports = 2;
  s.cpu_slots_busy = 1;
  s.running.push_back(RunningTrial(41, {1, 0}, {}, 2500.5));  // two GPUs: slot = the first one
  s.running.push_back(RunningTrial(42, {}, {1}, -1));         // no step line yet
  m.Update(s);
  Exposition e = Parse(m.Exposition());
  EXPECT_EQ(e.Value("ablate_worker_build_info", {{"version", "9.8.7"}}), 1);
  EXPECT_EQ(e.Value("ablate_worker_connected"), 1);
  EXPECT_EQ(e.Value("ablate_worker_draining"), 0);
  EXPECT_EQ(e.Value("ablate_worker_reconnects_total"), 0);
  EXPECT_EQ(e.Value("ablate_worker_cpu_slots"), 2);
  EXPECT_EQ(e.Value("ablate_worker_cpu_slots_busy"), 1);
  EXPECT_EQ(e.Value("ablate_worker_running_attempts"), 2);
  EXPECT_EQ(e.Value("ablate_worker_unacked_reports"), 2);
  EXPECT_EQ(e.Value("ablate_worker_trials_started_total"), 3);
  EXPECT_EQ(e.Value("ablate_worker_trials_finished_total", {{"outcome", "succeeded"}}), 1);
  EXPECT_EQ(e.Value("ablate_worker_trials_finished_total", {{"outcome", "lost"}}), 0);
  EXPECT_EQ(e.Count("ablate_worker_trials_finished_total"), int(Agent::Outcomes().size()));
  EXPECT_EQ(e.Value("ablate_worker_metric_batches_spooled_total"), 10);
  EXPECT_EQ(e.Value("ablate_worker_metric_batches_acked_total"), 8);
  EXPECT_EQ(e.Value("ablate_worker_metric_batches_replayed_total"), 0);
  EXPECT_EQ(e.Value("ablate_worker_gpu_busy", {{"gpu", "0"}, {"gpu_uuid", "GPU-fake-0"}}), 1);
  EXPECT_EQ(e.Value("ablate_worker_gpu_busy", {{"gpu", "1"}, {"gpu_uuid", "GPU-fake-1"}}), 1);
  EXPECT_EQ(e.Count("ablate_worker_tokens_per_second"), 2);
  EXPECT_EQ(e.Value("ablate_worker_tokens_per_second", {{"slot", "gpu0"}}), 2500.5);
  EXPECT_EQ(e.Value("ablate_worker_tokens_per_second", {{"slot", "cpu1"}}), 0);
  EXPECT_EQ(e.Count("ablate_worker_trial_info"), 3);
  EXPECT_EQ(e.Value("ablate_worker_trial_info",
                    {{"trial", "41"}, {"slot", "gpu1"}, {"gpu_uuid", "GPU-fake-1"}}),
            1);
  EXPECT_EQ(e.Value("ablate_worker_trial_info", {{"trial", "42"}, {"slot", "cpu1"}}), 1);

  // Trial 41 ends, 43 starts on GPU 1; the coordinator was lost once and the worker drains.
  s.connected = false;
  s.draining = true;
  s.registrations = 3;
  s.trials_started = 4;
  s.finished = {{"succeeded", 2}, {"canceled", 1}};
  s.batches = {12, 12, 5};
  s.running = {RunningTrial(42, {}, {1}, 800), RunningTrial(43, {1}, {}, 10)};
  m.Update(s);
  e = Parse(m.Exposition());
  EXPECT_EQ(e.Value("ablate_worker_connected"), 0);
  EXPECT_EQ(e.Value("ablate_worker_draining"), 1);
  EXPECT_EQ(e.Value("ablate_worker_reconnects_total"), 2);
  EXPECT_EQ(e.Value("ablate_worker_trials_started_total"), 4);
  EXPECT_EQ(e.Value("ablate_worker_trials_finished_total", {{"outcome", "succeeded"}}), 2);
  EXPECT_EQ(e.Value("ablate_worker_trials_finished_total", {{"outcome", "canceled"}}), 1);
  EXPECT_EQ(e.Value("ablate_worker_metric_batches_replayed_total"), 5);
  EXPECT_EQ(e.Value("ablate_worker_gpu_busy", {{"gpu", "0"}}), 0);
  EXPECT_EQ(e.Value("ablate_worker_gpu_busy", {{"gpu", "1"}}), 1);
  EXPECT_EQ(e.Count("ablate_worker_tokens_per_second"), 2);
  EXPECT_TRUE(std::isnan(e.Value("ablate_worker_tokens_per_second", {{"slot", "gpu0"}})));
  EXPECT_EQ(e.Value("ablate_worker_tokens_per_second", {{"slot", "gpu1"}}), 10);
  EXPECT_EQ(e.Value("ablate_worker_tokens_per_second", {{"slot", "cpu1"}}), 800);
  EXPECT_EQ(e.Count("ablate_worker_trial_info"), 2);
  EXPECT_TRUE(std::isnan(e.Value("ablate_worker_trial_info", {{"trial", "41"}})));

  // Idle: no per-trial series; counters never go back (a snapshot cannot lower them).
  s.running.clear();
  s.trials_started = 1;
  m.Update(s);
  e = Parse(m.Exposition());
  EXPECT_EQ(e.Count("ablate_worker_tokens_per_second"), 0);
  EXPECT_EQ(e.Count("ablate_worker_trial_info"), 0);
  EXPECT_EQ(e.Value("ablate_worker_gpu_busy", {{"gpu", "1"}}), 0);
  EXPECT_EQ(e.Value("ablate_worker_running_attempts"), 0);
  EXPECT_EQ(e.Value("ablate_worker_trials_started_total"), 4);
}

TEST(WorkerMetrics, PromtoolAcceptsTheExposition) {
  if (::access("/usr/bin/promtool", X_OK) != 0) {
    GTEST_SKIP() << "promtool not installed (apt-get install prometheus)";
  }
  WorkerMetrics m(TwoGpusTwoSlots());
  Agent::MetricsSnapshot s;
  s.registrations = 2;
  s.running.push_back(RunningTrial(41, {0}, {}, 2500));
  s.running.push_back(RunningTrial(42, {}, {0}, 300));
  m.Update(s);
  testing::TempDir dir;
  testing::WriteAll(dir.path() + "/metrics.txt", m.Exposition());
  const std::string out = dir.path() + "/promtool.out";
  const int rc = std::system(
      ("/usr/bin/promtool check metrics < '" + dir.path() + "/metrics.txt' > '" + out + "' 2>&1")
          .c_str());
  EXPECT_EQ(rc, 0) << testing::ReadAll(out);
}

// ---------------------------------------------------------------------------------------------

TEST(MetricsEndpoint, RefusesScrapesWithoutTheTokenAndServesOnlyMetrics) {
  int scrapes = 0;
  MetricsEndpoint ep(kToken, false, [&] {
    ++scrapes;
    return std::string("ablate_worker_connected{worker=\"w\"} 1\n");
  });
  const std::string bearer = std::string("Bearer ") + kToken;
  for (const std::string& auth :
       {std::string(), std::string("Bearer "), std::string("Bearer wrong"), std::string(kToken),
        std::string("Basic ") + kToken, bearer + "x"}) {
    MetricsReply r = ep.Handle("GET", "/metrics", auth);
    EXPECT_EQ(r.status, 401) << "'" << auth << "'";
    EXPECT_NE(r.body.find("bearer token"), std::string::npos) << r.body;
    EXPECT_EQ(r.content_type, "application/json");
    ASSERT_EQ(r.headers.size(), 1u);
    EXPECT_EQ(r.headers[0].first, "WWW-Authenticate");
  }
  EXPECT_EQ(scrapes, 0);
  // The scheme's case does not matter (RFC 7235).
  EXPECT_EQ(ep.Handle("GET", "/metrics", std::string("bEARER ") + kToken).status, 200);
  scrapes = 0;
  MetricsReply ok = ep.Handle("GET", "/metrics", bearer);
  EXPECT_EQ(ok.status, 200);
  EXPECT_EQ(ok.content_type, "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(ok.body, "ablate_worker_connected{worker=\"w\"} 1\n");
  EXPECT_EQ(scrapes, 1);
  EXPECT_EQ(ep.Handle("HEAD", "/metrics", bearer).status, 200);
  EXPECT_EQ(ep.Handle("GET", "/", bearer).status, 404);
  EXPECT_EQ(ep.Handle("GET", "/metrics/../etc/passwd", bearer).status, 404);
  EXPECT_EQ(ep.Handle("GET", "/api/workers", "").status, 404);
  MetricsReply post = ep.Handle("POST", "/metrics", bearer);
  EXPECT_EQ(post.status, 405);
  EXPECT_NE(post.body.find("method POST not allowed"), std::string::npos) << post.body;

  MetricsEndpoint open("", true, [] { return std::string("x 1\n"); });
  EXPECT_EQ(open.Handle("GET", "/metrics", "").status, 200);
  EXPECT_EQ(open.Handle("GET", "/metrics", "Bearer anything").status, 200);
  MetricsEndpoint no_token("", false, [] { return std::string("x 1\n"); });
  EXPECT_EQ(no_token.Handle("GET", "/metrics", "Bearer ").status, 401);
}

int UsedPort(int* fd_out) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::listen(fd, 1);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *fd_out = fd;
  return ntohs(a.sin_port);
}

TEST(MetricsServer, ServesOverHttpWithTheBearerToken) {
  WorkerMetrics metrics(TwoGpusTwoSlots());
  MetricsEndpoint ep(kToken, false, [&] {
    metrics.Update(Agent::MetricsSnapshot{});
    return metrics.Exposition();
  });
  MetricsServer server(&ep);
  auto bound = server.Start("127.0.0.1:0");
  ASSERT_TRUE(bound.ok()) << bound.status().ToString();
  ASSERT_EQ(bound->rfind("127.0.0.1:", 0), 0u) << *bound;
  const int port = std::stoi(bound->substr(10));
  ASSERT_GT(port, 0);

  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(5, 0);
  auto r = c.Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(r->get_header_value("WWW-Authenticate"), "Bearer realm=\"ablate-worker\"");
  r = c.Get("/metrics", {{"Authorization", std::string("Bearer ") + kToken}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  Exposition e = Parse(r->body);
  EXPECT_EQ(e.Value("ablate_worker_build_info"), 1);
  EXPECT_EQ(e.Value("ablate_worker_gpu_busy", {{"gpu", "1"}}), 0);
  r = c.Post("/metrics", {{"Authorization", std::string("Bearer ") + kToken}}, "x", "text/plain");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 405);
  r = c.Get("/nope");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  server.Stop();
  server.Stop();  // idempotent
  EXPECT_FALSE(c.Get("/metrics"));
}

TEST(MetricsServer, BadAddressesAreRefusedWithTheReason) {
  MetricsEndpoint ep(kToken, false, [] { return std::string(); });
  for (const char* addr :
       {"9101", ":9101", "127.0.0.1:", "127.0.0.1:x", "127.0.0.1:70000", "127.0.0.1:-1"}) {
    MetricsServer server(&ep);
    auto bound = server.Start(addr);
    ASSERT_FALSE(bound.ok()) << addr;
    EXPECT_EQ(bound.status().code(), StatusCode::kInvalidArgument) << addr;
    EXPECT_NE(bound.status().message().find(std::string("--metrics ") + addr), std::string::npos)
        << bound.status().message();
  }
  int fd = -1;
  const int used = UsedPort(&fd);
  MetricsServer server(&ep);
  auto bound = server.Start("127.0.0.1:" + std::to_string(used));
  ::close(fd);
  ASSERT_FALSE(bound.ok());
  EXPECT_EQ(bound.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(bound.status().message().find("cannot listen"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// The agent's snapshot while a fake trainer runs (against the in-process fake coordinator).

TEST(AgentMetricsSnapshot, FollowsARunningTrialAndCountsItsEnd) {
  testing::TempDir dir;
  testing::FakeCoordinator coord;
  int port = 0;
  grpc::ServerBuilder b;
  b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  b.RegisterService(&coord);
  auto server = b.BuildAndStart();
  ASSERT_TRUE(server);
  auto connector = MakeGrpcConnector("127.0.0.1:" + std::to_string(port), kToken);
  ASSERT_TRUE(connector.ok());

  AgentOptions o;
  o.worker_id = "w1";
  o.hostname = "test-host";
  o.cpu_slots = 2;
  o.nproc = 2;
  o.work_dir = dir.path() + "/work";
  o.trainer_path = testing::WriteFakeTrainer(dir.path());
  o.version = "test";
  v1::Assignment a;
  a.set_trial_id(17);
  a.set_attempt(2);
  a.set_config_json(R"({"mode": "ok", "steps": 40, "sleep": 0.05})");
  a.set_cpu_slots(1);
  coord.Assign(a);
  Agent agent(o, AgentEnv{connector->get(), RealSpawner(), SystemClock()});
  WorkerMetrics metrics({"w1", "test", {}, 2});
  auto run = std::async(std::launch::async, [&] { return agent.Run(); });

  // While it runs: one CPU slot busy, the trainer's tokens per second.
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        auto s = agent.metrics_snapshot();
        return s.running.size() == 1 && s.running[0].tokens_per_s >= 3000;
      },
      10000));
  Agent::MetricsSnapshot s = agent.metrics_snapshot();
  EXPECT_TRUE(s.connected);
  EXPECT_EQ(s.registrations, 1);
  EXPECT_EQ(s.trials_started, 1);
  EXPECT_EQ(s.cpu_slots_busy, 1);
  ASSERT_EQ(s.running.size(), 1u);
  EXPECT_EQ(s.running[0].trial_id, 17);
  EXPECT_EQ(s.running[0].attempt, 2);
  EXPECT_EQ(s.running[0].cpu_slots, std::vector<int>{0});
  EXPECT_TRUE(s.running[0].gpus.empty());
  metrics.Update(s);
  Exposition e = Parse(metrics.Exposition());
  EXPECT_GE(e.Value("ablate_worker_tokens_per_second", {{"slot", "cpu0"}}), 3000);
  EXPECT_EQ(e.Value("ablate_worker_trial_info", {{"trial", "17"}, {"slot", "cpu0"}}), 1);
  EXPECT_EQ(e.Value("ablate_worker_cpu_slots_busy"), 1);

  ASSERT_TRUE(coord.WaitUntil([&] { return coord.FinalOf(17, 2) != nullptr; }, 20000));
  ASSERT_TRUE(testing::WaitFor([&] { return agent.stats().running == 0; }, 5000));
  s = agent.metrics_snapshot();
  EXPECT_TRUE(s.running.empty());
  EXPECT_EQ(s.cpu_slots_busy, 0);
  EXPECT_EQ(s.finished["succeeded"], 1);
  EXPECT_EQ(s.unacked_reports, 0);
  EXPECT_GE(s.batches.batches_spooled, 2);  // 40 steps over 2 s: batches every 200 ms
  EXPECT_EQ(s.batches.batches_acked, s.batches.batches_spooled);
  EXPECT_EQ(s.batches.batches_replayed, 0);
  metrics.Update(s);
  e = Parse(metrics.Exposition());
  EXPECT_EQ(e.Count("ablate_worker_tokens_per_second"), 0);
  EXPECT_EQ(e.Value("ablate_worker_trials_finished_total", {{"outcome", "succeeded"}}), 1);
  EXPECT_EQ(e.Value("ablate_worker_metric_batches_acked_total"), s.batches.batches_acked);

  agent.Drain();
  ASSERT_EQ(run.wait_for(std::chrono::seconds(15)), std::future_status::ready);
  EXPECT_TRUE(run.get().ok());
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
}

}  // namespace
}  // namespace ablate::agent
