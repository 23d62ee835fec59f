// Observability end to end: the real ablated with --http, a worker (--metrics) running the real CPU
// trainer, a tiny sweep, and a REAL Prometheus server (Debian's `prometheus`) scraping ablated's
// and the worker's /metrics with the bearer token every second. Checks Prometheus's own query API
// for the coordinator's and the worker's series (a busy slot and tokens per second seen while the
// trials ran, the trial info joining slots to trials), the JSON API over the daemon's socket,
// `promtool check metrics` on both expositions; on deploy/prometheus `promtool check rules`, `test
// rules` (alerts_test.yml, the alert rules' unit tests) and `check config`; that every ablate_ name
// the alert rules and the Grafana dashboard use is in the metric catalog (GET
// /api/metrics/catalog), and that every dashboard query is valid PromQL. Skipped when
// prometheus/promtool are not installed.
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "process_util.h"
#include "temp_dir.h"

namespace ablate::testing {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// The first line of `text` that starts with `prefix`, "" when there is none.
std::string LineOf(const std::string& text, const std::string& prefix) {
  size_t pos = 0;
  while ((pos = text.find(prefix, pos)) != std::string::npos) {
    if (pos == 0 || text[pos - 1] == '\n') return text.substr(pos, text.find('\n', pos) - pos);
    pos += prefix.size();
  }
  return "";
}

// The value at the end of a sample line; NaN for "".
double ValueOf(const std::string& line) {
  return line.empty() ? NAN : std::stod(line.substr(line.rfind(' ') + 1));
}

// promtool's lint of an exposition; "" when it passes.
std::string Promlint(const std::string& dir, const std::string& name, const std::string& text) {
  std::ofstream(dir + "/" + name) << text;
  Output lint = ::ablate::testing::Run(
      {"/bin/sh", "-c", "/usr/bin/promtool check metrics < " + dir + "/" + name}, dir);
  return lint.code == 0 ? "" : "promtool check metrics " + name + ": " + lint.out;
}

TEST(Prometheus, ScrapesAblatedAndAWorker) {
  if (::access("/usr/bin/prometheus", X_OK) != 0 || ::access("/usr/bin/promtool", X_OK) != 0) {
    GTEST_SKIP() << "prometheus / promtool not installed (apt-get install prometheus)";
  }
  const ::ablate::testing::TempDir scratch("ablate_prom");
  std::string dir = scratch.path();
  ::mkdir((dir + "/coord").c_str(), 0700);
  ::mkdir((dir + "/shipped").c_str(), 0700);
  {
    std::ofstream corpus(dir + "/corpus.txt");
    unsigned x = 7;
    const char* words[] = {"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"};
    for (int i = 0; i < 6000; ++i) {
      x = x * 1103515245u + 12345u;
      corpus << words[(x >> 16) % 8] << ((x >> 8) % 9 == 0 ? ".\n" : " ");
    }
  }
  Proc coord = Spawn({ABLATED_BIN, "--data-dir", dir + "/coord", "--grpc", "127.0.0.1:0", "--http",
                      "127.0.0.1:0", "--heartbeat-seconds", "0.5"},
                     dir + "/ablated.log");
  std::string grpc_addr = WaitForFile(dir + "/coord/ablated.addr", seconds(20));
  std::string http_addr = WaitForFile(dir + "/coord/ablated.http", seconds(20));
  ASSERT_FALSE(http_addr.empty()) << ReadFile(dir + "/ablated.log");
  std::string token = Trim(ReadFile(dir + "/coord/token"));
  int http_port = std::stoi(http_addr.substr(http_addr.rfind(':') + 1));
  Proc worker = Spawn({ABLATE_WORKER_BIN, "--coordinator", grpc_addr, "--token-file",
                       dir + "/coord/token", "--gpus", "none", "--cpu-slots", "2", "--work-dir",
                       dir + "/w0", "--trainer", ABLATE_TRAIN_BIN, "--data-root", dir,
                       "--metrics", "127.0.0.1:0"},
                      dir + "/worker.log");
  std::string worker_metrics = WaitForFile(dir + "/w0/worker.metrics", seconds(20));
  ASSERT_FALSE(worker_metrics.empty()) << ReadFile(dir + "/worker.log");
  int worker_port = std::stoi(worker_metrics.substr(worker_metrics.rfind(':') + 1));

  // Prometheus scraping ablated every second with the bearer token.
  int prom_port = FreePort();
  std::ofstream(dir + "/prometheus.yml")
      << "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
         "rule_files: ['" ABLATE_SOURCE_DIR "/deploy/prometheus/alerts.yml']\n"
         "scrape_configs:\n"
         "  - job_name: ablated\n"
         "    authorization: {type: Bearer, credentials_file: '" << dir << "/coord/token'}\n"
         "    static_configs: [{targets: ['" << http_addr << "']}]\n"
         "  - job_name: ablate-worker\n"
         "    authorization: {type: Bearer, credentials_file: '" << dir << "/coord/token'}\n"
         "    static_configs: [{targets: ['" << worker_metrics << "']}]\n";
  Proc prom = Spawn({"/usr/bin/prometheus", "--config.file=" + dir + "/prometheus.yml",
                     "--storage.tsdb.path=" + dir + "/tsdb",
                     "--web.listen-address=127.0.0.1:" + std::to_string(prom_port)},
                    dir + "/prometheus.log");

  // Prometheus itself: its query API. The trials start only once it scrapes the worker, so the
  // worker's busy state and throughput are sampled while they run.
  httplib::Client pc("127.0.0.1", prom_port);
  pc.set_read_timeout(5, 0);
  auto query_json = [&](const std::string& q) -> json {
    auto res = pc.Get("/api/v1/query", httplib::Params{{"query", q}}, httplib::Headers{});
    if (!res || res->status != 200) return json();
    json j = json::parse(res->body, nullptr, false);
    if (!j.is_object() || j["status"] != "success") return json();
    return j["data"]["result"];
  };
  auto query = [&](const std::string& q) -> double {
    json r = query_json(q);
    if (!r.is_array() || r.empty()) return NAN;
    return std::stod(r[0]["value"][1].get<std::string>());
  };
  double worker_up = NAN;
  for (int i = 0; i < 120 && !(worker_up == 1); ++i) {  // up to 60 s (Prometheus starts slowly)
    worker_up = query("up{job=\"ablate-worker\"}");
    if (!(worker_up == 1)) std::this_thread::sleep_for(milliseconds(500));
  }
  ASSERT_EQ(worker_up, 1) << ReadFile(dir + "/prometheus.log");

  std::string spec = dir + "/tiny.yaml";
  std::ofstream(spec) << "name: tiny\nbase:\n"
                         "  data: {corpus: "
                      << dir
                      << "/corpus.txt, val_fraction: 0.1, eval_batches: 2}\n"
                         "  model: {seq_len: 32, layers: 1, d_model: 32, heads: 2}\n"
                         // ~6 s per trial on 2 cores: several 1 s scrapes while it runs.
                         "  train: {steps: 1200, tokens_per_step: 256, micro_batch: 8, warmup: 2,\n"
                         "          eval_every: 400, diagnostics_every: 400,\n"
                         "          checkpoint_every: 400,\n"
                         "          threads: 1}\n"
                         "resources: {gpus: 0}\nseeds: [0, 1]\n";
  Output sub = ::ablate::testing::Run({ABLATE_CLI_BIN, "submit", spec}, dir,
                   {"ABLATE_COORDINATOR=" + grpc_addr, "ABLATE_TOKEN_FILE=" + dir + "/coord/token"});
  ASSERT_EQ(sub.code, 0) << sub.out;

  httplib::Client api("127.0.0.1", http_port);
  api.set_read_timeout(10, 0);
  httplib::Headers auth = {{"Authorization", "Bearer " + token}};
  // The worker's own endpoint: refused without the token; while a trial runs, a busy slot and the
  // trainer's throughput (this exposition is linted below).
  httplib::Client wc("127.0.0.1", worker_port);
  wc.set_read_timeout(5, 0);
  ASSERT_EQ(wc.Get("/metrics")->status, 401);
  std::string worker_busy_text;
  json sweep;
  for (int i = 0; i < 600; ++i) {  // up to 180 s
    if (worker_busy_text.empty()) {
      auto w = wc.Get("/metrics", auth);
      if (w && w->status == 200 &&
          ValueOf(LineOf(w->body, "ablate_worker_cpu_slots_busy{")) >= 1 &&
          ValueOf(LineOf(w->body, "ablate_worker_tokens_per_second{")) > 0) {
        worker_busy_text = w->body;
      }
    }
    auto r = api.Get("/api/sweeps/tiny", auth);
    if (r && r->status == 200) {
      sweep = json::parse(r->body);
      if (sweep["finished"] == true) break;
    }
    std::this_thread::sleep_for(milliseconds(300));
  }
  ASSERT_EQ(sweep["counts"]["succeeded"], 2) << sweep.dump() << ReadFile(dir + "/worker.log");

  // The JSON API over the daemon's socket.
  auto r = api.Get("/api/sweeps/tiny/trials?sort=val_loss&limit=1", auth);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json page = json::parse(r->body);
  EXPECT_EQ(page["total"], 2);
  int64_t trial = page["trials"][0]["id"];
  r = api.Get(("/api/trials/" + std::to_string(trial) + "/series?name=loss&points=4").c_str(), auth);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_LE(json::parse(r->body)["steps"].size(), 4u);
  EXPECT_GE(json::parse(r->body)["total_points"].get<int>(), 10);
  r = api.Get("/api/workers", auth);
  ASSERT_TRUE(r);
  EXPECT_EQ(json::parse(r->body)["workers"].size(), 1u);
  EXPECT_EQ(api.Get("/metrics")->status, 401);

  // promtool lints the exposition ablated serves.
  r = api.Get("/metrics", auth);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  EXPECT_EQ(Promlint(dir, "scraped.txt", r->body), "");
  ASSERT_FALSE(worker_busy_text.empty()) << "never saw a busy slot with tokens/s on the worker";
  EXPECT_EQ(Promlint(dir, "worker.txt", worker_busy_text), "");
  Output rules = ::ablate::testing::Run({"/usr/bin/promtool", "check", "rules",
                      ABLATE_SOURCE_DIR "/deploy/prometheus/alerts.yml"}, dir);
  EXPECT_EQ(rules.code, 0) << rules.out;
  Output rule_tests = ::ablate::testing::Run(
      {"/usr/bin/promtool", "test", "rules",
       ABLATE_SOURCE_DIR "/deploy/prometheus/alerts_test.yml"},
      dir);
  EXPECT_EQ(rule_tests.code, 0) << rule_tests.out;
  // The shipped scrape config, with this run's token file in place of /var/lib/ablate/token.
  std::string shipped = ReadFile(ABLATE_SOURCE_DIR "/deploy/prometheus/prometheus.yml");
  ASSERT_NE(shipped.find("job_name: ablate-worker"), std::string::npos);
  for (size_t at; (at = shipped.find("/var/lib/ablate/token")) != std::string::npos;) {
    shipped.replace(at, std::strlen("/var/lib/ablate/token"), dir + "/coord/token");
  }
  std::ofstream(dir + "/shipped/prometheus.yml") << shipped;
  std::ofstream(dir + "/shipped/alerts.yml")
      << ReadFile(ABLATE_SOURCE_DIR "/deploy/prometheus/alerts.yml");
  Output config = ::ablate::testing::Run(
      {"/usr/bin/promtool", "check", "config", dir + "/shipped/prometheus.yml"}, dir);
  EXPECT_EQ(config.code, 0) << config.out;

  // Prometheus itself has scraped the series: ask its query API.
  double succeeded = NAN;
  for (int i = 0; i < 120 && !(succeeded == 2); ++i) {  // up to 60 s (Prometheus starts slowly)
    succeeded = query("sum(ablate_trials{state=\"succeeded\"})");
    if (!(succeeded == 2)) std::this_thread::sleep_for(milliseconds(500));
  }
  EXPECT_EQ(succeeded, 2) << ReadFile(dir + "/prometheus.log");
  EXPECT_EQ(query("up{job=\"ablated\"}"), 1);
  EXPECT_EQ(query("sum(ablate_trials{sweep=\"tiny\",state=~\"queued|running|failed\"})"), 0);
  EXPECT_GE(query("ablate_assignments_total"), 2);
  EXPECT_GE(query("ablate_metric_points_ingested_total"), 20);
  EXPECT_EQ(query("ablate_queue_wait_seconds_count"), 2);
  EXPECT_EQ(query("ablate_trial_duration_seconds_count{state=\"succeeded\"}"), 2);
  EXPECT_GT(query("ablate_store_commit_duration_seconds_count"), 0);
  EXPECT_EQ(query("sum(ablate_workers)"), 1);
  EXPECT_EQ(query("ablate_build_info{component=\"ablated\"}"), 1);

  // The worker's series in Prometheus. Counters first reach their final values (the scrape after
  // the last ack); busy state and throughput were sampled while the trials ran.
  double worker_succeeded = NAN;
  for (int i = 0; i < 40 && !(worker_succeeded == 2); ++i) {  // up to 20 s
    worker_succeeded = query("ablate_worker_trials_finished_total{outcome=\"succeeded\"}");
    if (!(worker_succeeded == 2)) std::this_thread::sleep_for(milliseconds(500));
  }
  EXPECT_EQ(worker_succeeded, 2);
  EXPECT_EQ(query("up{job=\"ablate-worker\"}"), 1);
  EXPECT_EQ(query("ablate_worker_build_info"), 1);
  EXPECT_EQ(query("ablate_worker_connected"), 1);
  EXPECT_EQ(query("ablate_worker_cpu_slots"), 2);
  EXPECT_EQ(query("ablate_worker_trials_started_total"), 2);
  EXPECT_EQ(query("sum(ablate_worker_trials_finished_total)"), 2);
  EXPECT_EQ(query("max_over_time(ablate_worker_cpu_slots_busy[10m])"), 2)
      << "both trials run at once on the 2 slots";
  EXPECT_GE(query("max_over_time(ablate_worker_running_attempts[10m])"), 1);
  EXPECT_EQ(query("ablate_worker_running_attempts"), 0);
  EXPECT_GT(query("max(max_over_time(ablate_worker_tokens_per_second[10m]))"), 0);
  EXPECT_TRUE(std::isnan(query("count(ablate_worker_tokens_per_second)")))
      << "idle: no throughput series";
  EXPECT_GT(query("ablate_worker_metric_batches_spooled_total"), 0);
  EXPECT_EQ(query("ablate_worker_metric_batches_acked_total - "
                  "ablate_worker_metric_batches_spooled_total"),
            0);
  EXPECT_EQ(query("ablate_worker_metric_batches_replayed_total"), 0);
  EXPECT_EQ(query("ablate_worker_reconnects_total"), 0);
  EXPECT_EQ(query("ablate_worker_unacked_reports"), 0);
  // The trial info joins the worker's slots to the coordinator's trial ids: both trials were seen.
  std::set<std::string> seen_trials;
  json info = query_json("count by (trial, slot) (max_over_time(ablate_worker_trial_info[10m]))");
  ASSERT_TRUE(info.is_array()) << info.dump();
  for (const auto& series : info) seen_trials.insert(series["metric"]["trial"].get<std::string>());
  EXPECT_EQ(seen_trials.size(), 2u) << info.dump();
  EXPECT_EQ(seen_trials.count(std::to_string(trial)), 1u) << info.dump();
  // The dashboard's "tokens per second by trial" join, over the run.
  json joined = query_json(
      "count by (trial) (max_over_time((ablate_worker_tokens_per_second * on (instance, worker, "
      "slot) group_left (trial) ablate_worker_trial_info)[10m:1s]))");
  EXPECT_EQ(joined.size(), 2u) << joined.dump();
  // Every query of the Grafana dashboard is valid PromQL for this Prometheus.
  const json dashboard =
      json::parse(ReadFile(ABLATE_SOURCE_DIR "/deploy/grafana/dashboards/ablate.json"));
  int exprs = 0;
  for (const auto& panel : dashboard["panels"]) {
    if (!panel.contains("targets")) continue;
    for (const auto& target : panel["targets"]) {
      std::string expr = target["expr"];
      for (const std::string var : {"$sweep", "$worker"}) {
        for (size_t at; (at = expr.find(var)) != std::string::npos;) {
          expr.replace(at, var.size(), ".*");
        }
      }
      ++exprs;
      EXPECT_TRUE(query_json(expr).is_array()) << panel["title"] << ": " << expr;
    }
  }
  EXPECT_GE(exprs, 20);
  // The alert rules loaded and none fires for a healthy run.
  auto rules_res = pc.Get("/api/v1/rules");
  ASSERT_TRUE(rules_res);
  for (const char* alert : {"AblateWorkerLost", "AblateWorkerDown", "AblateWorkerDisconnected",
                           "AblateWorkerGpuIdle", "AblateWorkerCpuSlotsIdle",
                           "AblateWorkerReportBacklog", "AblateWorkerTrialsFailing",
                           "AblateWorkerFlapping"}) {
    EXPECT_NE(rules_res->body.find(std::string("\"") + alert + "\""), std::string::npos)
        << alert << " not loaded: " << rules_res->body;
  }
  auto alerts_res = pc.Get("/api/v1/alerts");
  ASSERT_TRUE(alerts_res);
  EXPECT_EQ(json::parse(alerts_res->body)["data"]["alerts"].size(), 0u) << alerts_res->body;

  // One catalog: every series the worker exposes is in it with its type, and every ablate_ name
  // the alert rules and the Grafana dashboard use exists.
  r = api.Get("/api/metrics/catalog", auth);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  std::map<std::string, std::string> catalog;  // name -> type
  const json catalog_json = json::parse(r->body);
  for (const auto& m : catalog_json["metrics"]) {
    catalog[m["name"].get<std::string>()] = m["type"].get<std::string>();
  }
  ASSERT_GT(catalog.size(), 20u) << r->body;
  std::istringstream lines(worker_busy_text);
  std::string line;
  int typed = 0;
  while (std::getline(lines, line)) {
    if (line.rfind("# TYPE ", 0) != 0) continue;
    ++typed;
    std::string name = line.substr(7, line.find(' ', 7) - 7);
    ASSERT_TRUE(catalog.count(name)) << name << " is not in the catalog";
    EXPECT_EQ(line.substr(line.find(' ', 7) + 1), catalog[name]) << name;
  }
  // Every worker series while a trial runs, but ablate_worker_gpu_busy: this worker has no GPU.
  EXPECT_EQ(typed, 15) << worker_busy_text;
  for (const std::string& file : {std::string(ABLATE_SOURCE_DIR "/deploy/prometheus/alerts.yml"),
                                  std::string(ABLATE_SOURCE_DIR
                                              "/deploy/grafana/dashboards/ablate.json")}) {
    const std::string text = ReadFile(file);
    ASSERT_FALSE(text.empty()) << file;
    static const std::regex kName("ablate_[a-z_]+");
    int names = 0;
    for (auto it = std::sregex_iterator(text.begin(), text.end(), kName);
         it != std::sregex_iterator(); ++it) {
      std::string name = it->str();
      for (const char* suffix : {"_bucket", "_count", "_sum"}) {
        const std::string sfx = suffix;
        if (!catalog.count(name) && name.size() > sfx.size() &&
            name.compare(name.size() - sfx.size(), sfx.size(), sfx) == 0) {
          name.resize(name.size() - sfx.size());
        }
      }
      ++names;
      EXPECT_TRUE(catalog.count(name)) << file << " uses " << it->str() << ", not in the catalog";
    }
    EXPECT_GT(names, 5) << file;
  }

  Kill(prom, SIGTERM);
  Wait(prom, seconds(10));
  Kill(worker, SIGKILL);
  Wait(worker, seconds(5));
  Kill(coord, SIGTERM);
  EXPECT_EQ(Wait(coord, seconds(15)), 0) << ReadFile(dir + "/ablated.log");
}

}  // namespace
}  // namespace ablate::testing
