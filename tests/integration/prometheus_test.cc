// Observability end to end: the real ablated with --http, a worker running the real CPU trainer, a
// tiny sweep, and a REAL Prometheus server (Debian's `prometheus`) scraping ablated's /metrics with
// the bearer token every second. Checks Prometheus's own query API for the ablate series, the JSON
// API over the daemon's socket, `promtool check metrics` on the scraped text and `promtool check
// rules` on deploy/prometheus/alerts.yml. Skipped when prometheus/promtool are not installed.
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "process_util.h"

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

std::string WaitForFile(const std::string& path, seconds timeout) {
  auto end = std::chrono::steady_clock::now() + timeout;
  std::string s;
  while ((s = Trim(ReadFile(path))).empty() && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(milliseconds(50));
  }
  return s;
}

TEST(Prometheus, ScrapesAblated) {
  if (::access("/usr/bin/prometheus", X_OK) != 0 || ::access("/usr/bin/promtool", X_OK) != 0) {
    GTEST_SKIP() << "prometheus / promtool not installed (apt-get install prometheus)";
  }
  char tmpl[] = "/tmp/ablate_prom_XXXXXX";
  std::string dir = ::mkdtemp(tmpl);
  ::mkdir((dir + "/coord").c_str(), 0700);
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
                       dir + "/w0", "--trainer", ABLATE_TRAIN_BIN, "--data-root", dir},
                      dir + "/worker.log");

  // Prometheus scraping ablated every second with the bearer token.
  int prom_port = FreePort();
  std::ofstream(dir + "/prometheus.yml")
      << "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
         "rule_files: ['" ABLATE_SOURCE_DIR "/deploy/prometheus/alerts.yml']\n"
         "scrape_configs:\n"
         "  - job_name: ablated\n"
         "    authorization: {type: Bearer, credentials_file: '" << dir << "/coord/token'}\n"
         "    static_configs: [{targets: ['" << http_addr << "']}]\n";
  Proc prom = Spawn({"/usr/bin/prometheus", "--config.file=" + dir + "/prometheus.yml",
                     "--storage.tsdb.path=" + dir + "/tsdb",
                     "--web.listen-address=127.0.0.1:" + std::to_string(prom_port)},
                    dir + "/prometheus.log");

  std::string spec = dir + "/tiny.yaml";
  std::ofstream(spec) << "name: tiny\nbase:\n"
                         "  data: {corpus: " << dir << "/corpus.txt, val_fraction: 0.1, eval_batches: 2}\n"
                         "  model: {seq_len: 32, layers: 1, d_model: 32, heads: 2}\n"
                         "  attention: {block_q: 16, block_kv: 16}\n"
                         "  train: {steps: 10, tokens_per_step: 256, micro_batch: 8, warmup: 2,\n"
                         "          eval_every: 5, diagnostics_every: 5, checkpoint_every: 5, threads: 1}\n"
                         "resources: {gpus: 0}\nseeds: [0, 1]\n";
  Output sub = ::ablate::testing::Run({ABLATE_CLI_BIN, "submit", spec}, dir,
                   {"ABLATE_COORDINATOR=" + grpc_addr, "ABLATE_TOKEN_FILE=" + dir + "/coord/token"});
  ASSERT_EQ(sub.code, 0) << sub.out;

  httplib::Client api("127.0.0.1", http_port);
  api.set_read_timeout(10, 0);
  httplib::Headers auth = {{"Authorization", "Bearer " + token}};
  json sweep;
  for (int i = 0; i < 600; ++i) {  // up to 180 s
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
  std::ofstream(dir + "/scraped.txt") << r->body;
  Output lint = ::ablate::testing::Run({"/bin/sh", "-c", "/usr/bin/promtool check metrics < " + dir + "/scraped.txt"}, dir);
  EXPECT_EQ(lint.code, 0) << lint.out;
  Output rules = ::ablate::testing::Run({"/usr/bin/promtool", "check", "rules",
                      ABLATE_SOURCE_DIR "/deploy/prometheus/alerts.yml"}, dir);
  EXPECT_EQ(rules.code, 0) << rules.out;

  // Prometheus itself has scraped the series: ask its query API.
  httplib::Client pc("127.0.0.1", prom_port);
  pc.set_read_timeout(5, 0);
  auto query = [&](const std::string& q) -> double {
    auto res = pc.Get("/api/v1/query", httplib::Params{{"query", q}}, httplib::Headers{});
    if (!res || res->status != 200) return NAN;
    json j = json::parse(res->body, nullptr, false);
    if (!j.is_object() || j["status"] != "success" || j["data"]["result"].empty()) return NAN;
    return std::stod(j["data"]["result"][0]["value"][1].get<std::string>());
  };
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
  // The alert rules loaded and none fires for a healthy run.
  auto rules_res = pc.Get("/api/v1/rules");
  ASSERT_TRUE(rules_res);
  EXPECT_NE(rules_res->body.find("AblateWorkerLost"), std::string::npos) << rules_res->body;

  Kill(prom, SIGTERM);
  Wait(prom, seconds(10));
  Kill(worker, SIGKILL);
  Wait(worker, seconds(5));
  Kill(coord, SIGTERM);
  EXPECT_EQ(Wait(coord, seconds(15)), 0) << ReadFile(dir + "/ablated.log");
}

}  // namespace
}  // namespace ablate::testing
