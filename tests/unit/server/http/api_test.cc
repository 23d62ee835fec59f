#include "http/api.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "http/http_server.h"
#include "temp_dir.h"

namespace ablate::server::http {
namespace {

using nlohmann::json;

// A sweep of 40 trials over (kind: a|b) x (p: 0, 0.5, 1, 2, 10) x (seed 0..3); trial i has
// loss 10 - i * 0.1 except every 7th, which has no loss (NaN); states vary.
class ApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tmp_.path();
    ::mkdir((dir_ + "/web").c_str(), 0755);
    std::ofstream(dir_ + "/web/index.html") << "<html>dashboard</html>";
    std::ofstream(dir_ + "/secret.txt") << "secret";
    Store::Options o;
    o.path = dir_ + "/db";
    auto s = Store::Open(o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(*s);
    SweepRecord sw;
    sw.name = "demo";
    sw.axes = {"kind", "p", "seed"};
    std::vector<TrialRecord> trials;
    const char* ps[] = {"0", "0.5", "1", "2", "10"};
    for (int i = 0; i < 40; ++i) {
      TrialRecord t;
      t.config_hash = "h" + std::to_string(i);
      t.config_json = "{\"i\":" + std::to_string(i) + "}";
      t.axes = {{"kind", i % 2 ? "b" : "a"}, {"p", ps[(i / 2) % 5]}, {"seed", std::to_string(i / 10)}};
      t.order_key = i;
      trials.push_back(t);
    }
    auto sub = store_->SubmitSweep(sw, trials);
    ASSERT_TRUE(sub.ok());
    sweep_id_ = sub->sweep_id;
    for (int i = 0; i < 40; ++i) {
      int64_t id = sub->inserted[i].id;
      ids_.push_back(id);
      AttemptRecord a;
      a.trial_id = id;
      a.attempt = 1;
      a.worker_id = "w0";
      store_->InsertAttempt(a);
      std::vector<Point> pts;
      if (i % 7 != 0) pts.push_back({5, "loss", 10 - i * 0.1});
      pts.push_back({5, "final_val_loss", i % 2 ? 2.0 : 1.0});
      for (int s = 6; s < 2006; ++s) pts.push_back({s, "curve", double(s % 100)});
      store_->AppendMetrics(id, 1, 1, pts, [](const Status&, bool) {});
      TrialUpdate u;
      u.trial_id = id;
      u.state = i < 30 ? v1::SUCCEEDED : (i < 35 ? v1::RUNNING : v1::FAILED);
      u.attempts = 1;
      store_->UpdateTrial(u);
    }
    ASSERT_TRUE(store_->Flush().ok());
    ApiOptions opt;
    opt.token = "secret-token";
    opt.web_dir = dir_ + "/web";
    api_ = std::make_unique<Api>(store_.get(), nullptr, &metrics_, opt);
  }

  HttpResponse Get(const std::string& path, std::multimap<std::string, std::string> params = {},
                   bool auth = true) {
    HttpRequest r;
    r.path = path;
    r.params = std::move(params);
    if (auth) r.headers["authorization"] = "Bearer secret-token";
    return api_->Handle(r);
  }
  json GetJson(const std::string& path, std::multimap<std::string, std::string> params = {}) {
    auto r = Get(path, std::move(params));
    EXPECT_EQ(r.status, 200) << path << ": " << r.body;
    return json::parse(r.body);
  }
  std::string Trials() { return "/api/sweeps/" + std::to_string(sweep_id_) + "/trials"; }

  ::ablate::testing::TempDir tmp_{"ablate_api"};  // first: removed after everything else
  std::string dir_;
  std::unique_ptr<Store> store_;
  metrics::CoordinatorMetrics metrics_{metrics::CoordinatorMetrics::Options{0}};
  std::unique_ptr<Api> api_;
  int64_t sweep_id_ = 0;
  std::vector<int64_t> ids_;
};

TEST_F(ApiTest, AuthRequiredEverywhereButStaticFiles) {
  for (const char* p : {"/api/sweeps", "/api/sweeps/demo", "/api/workers", "/metrics",
                        "/api/trials/1", "/api/nothing"}) {
    auto r = Get(p, {}, false);
    EXPECT_EQ(r.status, 401) << p;
    EXPECT_NE(json::parse(r.body)["error"].get<std::string>().find("token"), std::string::npos);
    EXPECT_EQ(r.body.find("demo"), std::string::npos);  // nothing leaks
  }
  HttpRequest wrong;
  wrong.path = "/api/sweeps";
  wrong.headers["authorization"] = "Bearer secret-tokeN";
  EXPECT_EQ(api_->Handle(wrong).status, 401);
  wrong.headers["authorization"] = "secret-token";  // no scheme
  EXPECT_EQ(api_->Handle(wrong).status, 401);
  wrong.headers["authorization"] = "Basic secret-token";
  EXPECT_EQ(api_->Handle(wrong).status, 401);
  wrong.headers["authorization"] = "Bearer ";
  EXPECT_EQ(api_->Handle(wrong).status, 401);
  // The scheme's case does not matter (RFC 7235; curl and proxies may send "bearer").
  HttpRequest lower;
  lower.path = "/api/sweeps";
  lower.headers["authorization"] = "bearer secret-token";
  EXPECT_EQ(api_->Handle(lower).status, 200);
  wrong.headers.clear();
  wrong.params = {{"token", "nope"}};
  EXPECT_EQ(api_->Handle(wrong).status, 401);
  wrong.params = {{"token", "secret-token"}};  // EventSource style
  EXPECT_EQ(api_->Handle(wrong).status, 200);
  // Writes do not exist: any other method is refused and the store is unchanged.
  HttpRequest post;
  post.method = "POST";
  post.path = "/api/sweeps";
  EXPECT_EQ(api_->Handle(post).status, 405);
  EXPECT_EQ(store_->ListSweeps()->size(), 1u);
  EXPECT_EQ(Get("/", {}, false).status, 200);  // the dashboard's code needs no token
}

TEST_F(ApiTest, MetricsPublicOption) {
  ApiOptions opt;
  opt.token = "secret-token";
  opt.metrics_public = true;
  Api open(store_.get(), nullptr, &metrics_, opt);
  HttpRequest r;
  r.path = "/metrics";
  auto resp = open.Handle(r);
  EXPECT_EQ(resp.status, 200);
  EXPECT_NE(resp.body.find("ablate_trials{"), std::string::npos);
  r.path = "/api/sweeps";
  EXPECT_EQ(open.Handle(r).status, 401);  // the API stays closed
}

TEST_F(ApiTest, SweepsAndSweep) {
  json j = GetJson("/api/sweeps");
  ASSERT_EQ(j["sweeps"].size(), 1u);
  EXPECT_EQ(j["sweeps"][0]["name"], "demo");
  EXPECT_EQ(j["sweeps"][0]["counts"]["succeeded"], 30);
  EXPECT_EQ(j["sweeps"][0]["counts"]["queued"], 0);
  EXPECT_EQ(j["sweeps"][0]["total"], 40);
  EXPECT_EQ(GetJson("/api/sweeps/demo")["id"], sweep_id_);
  EXPECT_EQ(GetJson("/api/sweeps/" + std::to_string(sweep_id_))["name"], "demo");
  auto r = Get("/api/sweeps/nope");
  EXPECT_EQ(r.status, 404);
  EXPECT_NE(json::parse(r.body)["error"].get<std::string>().find("nope"), std::string::npos);
}

// The dashboard's notice: waiting_reason comes from the scheduler (no worker connected here), and
// is empty once nothing is queued; without a scheduler it is empty.
TEST_F(ApiTest, SweepsSayWhyQueuedTrialsWait) {
  EXPECT_EQ(GetJson("/api/sweeps")["sweeps"][0]["waiting_reason"], "");  // no scheduler
  Scheduler scheduler(store_.get(), SystemClock(), SchedulerOptions());
  ASSERT_TRUE(scheduler.Recover().ok());
  SweepRecord sw;
  sw.name = "idle";
  sw.axes = {"i"};
  TrialRecord t;
  t.config_hash = "idle0";
  t.config_json = "{}";
  t.axes = {{"i", "0"}};
  t.gpus = 1;
  auto sub = scheduler.Submit(sw, {t});
  ASSERT_TRUE(sub.ok()) << sub.status().ToString();
  ApiOptions opt;
  opt.token = "secret-token";
  api_ = std::make_unique<Api>(store_.get(), &scheduler, &metrics_, opt);
  json j = GetJson("/api/sweeps");
  ASSERT_EQ(j["sweeps"].size(), 2u);
  for (const auto& s : j["sweeps"]) {
    EXPECT_EQ(s["waiting_reason"], s["name"] == "idle"
                                       ? "no worker is connected; start an ablate-worker"
                                       : "")
        << s.dump();
  }
  EXPECT_EQ(GetJson("/api/sweeps/idle")["waiting_reason"],
            "no worker is connected; start an ablate-worker");
  api_.reset();
}

TEST_F(ApiTest, TrialsPaginate) {
  json j = GetJson(Trials(), {{"limit", "15"}, {"offset", "30"}});
  EXPECT_EQ(j["total"], 40);
  ASSERT_EQ(j["trials"].size(), 10u);
  EXPECT_EQ(j["trials"][0]["id"], ids_[30]);
  j = GetJson(Trials(), {{"offset", "100"}});
  EXPECT_EQ(j["trials"].size(), 0u);
  EXPECT_EQ(j["total"], 40);
  EXPECT_EQ(GetJson(Trials())["trials"].size(), 40u);  // default limit 100
}

TEST_F(ApiTest, TrialsSortMissingLast) {
  json j = GetJson(Trials(), {{"sort", "loss"}, {"order", "asc"}, {"limit", "40"}});
  auto& t = j["trials"];
  ASSERT_EQ(t.size(), 40u);
  EXPECT_EQ(t[0]["id"], ids_[39]);  // lowest loss
  for (size_t i = 1; i < 34; ++i) EXPECT_LE(t[i - 1]["loss"].get<double>(), t[i]["loss"].get<double>());
  for (size_t i = 34; i < 40; ++i) EXPECT_TRUE(t[i]["loss"].is_null()) << i;  // 6 NaNs, last
  j = GetJson(Trials(), {{"sort", "loss"}, {"order", "desc"}, {"limit", "40"}});
  EXPECT_EQ(j["trials"][0]["id"], ids_[1]);
  EXPECT_TRUE(j["trials"][39]["loss"].is_null());
  // Axis values sort numerically: 0 < 0.5 < 1 < 2 < 10.
  j = GetJson(Trials(), {{"sort", "axis.p"}, {"order", "desc"}, {"limit", "5"}});
  for (auto& x : j["trials"]) EXPECT_EQ(x["axes"]["p"], "10");
  j = GetJson(Trials(), {{"sort", "id"}, {"order", "desc"}, {"limit", "1"}});
  EXPECT_EQ(j["trials"][0]["id"], ids_[39]);
}

TEST_F(ApiTest, TrialsFilter) {
  json j = GetJson(Trials(), {{"state", "running,failed"}});
  EXPECT_EQ(j["total"], 10);
  j = GetJson(Trials(), {{"axis.kind", "b"}, {"axis.p", "0.5"}});
  EXPECT_EQ(j["total"], 4);
  for (auto& x : j["trials"]) {
    EXPECT_EQ(x["axes"]["kind"], "b");
    EXPECT_EQ(x["axes"]["p"], "0.5");
  }
  EXPECT_EQ(GetJson(Trials(), {{"axis.nope", "1"}})["total"], 0);
  for (auto bad : std::vector<std::multimap<std::string, std::string>>{
           {{"limit", "0"}}, {{"limit", "1001"}}, {{"offset", "-1"}}, {{"limit", "x"}},
           {{"sort", "bogus"}}, {{"order", "up"}}, {{"state", "done"}}, {{"colour", "red"}}}) {
    auto r = Get(Trials(), bad);
    EXPECT_EQ(r.status, 400) << bad.begin()->first;
    EXPECT_NE(r.body.find(bad.begin()->first), std::string::npos) << r.body;
  }
}

TEST_F(ApiTest, TrialDetailSeriesResults) {
  json t = GetJson("/api/trials/" + std::to_string(ids_[3]));
  EXPECT_EQ(t["config"]["i"], 3);
  EXPECT_EQ(t["attempts"].size(), 1u);
  EXPECT_EQ(t["attempts"][0]["worker_id"], "w0");
  EXPECT_EQ(t["latest_metrics"]["curve"]["step"], 2005);
  EXPECT_EQ(Get("/api/trials/999999").status, 404);
  EXPECT_EQ(Get("/api/trials/abc").status, 404);

  json s = GetJson("/api/trials/" + std::to_string(ids_[3]) + "/series",
                   {{"name", "curve"}, {"points", "100"}});
  EXPECT_EQ(s["total_points"], 2000);
  EXPECT_LE(s["steps"].size(), 100u);
  EXPECT_EQ(s["steps"].size(), s["values"].size());
  double mx = 0;
  for (auto& v : s["values"]) mx = std::max(mx, v.get<double>());
  EXPECT_EQ(mx, 99);  // the maxima survive downsampling
  EXPECT_EQ(Get("/api/trials/" + std::to_string(ids_[3]) + "/series").status, 400);
  EXPECT_EQ(Get("/api/trials/" + std::to_string(ids_[3]) + "/series",
                {{"name", "loss"}, {"points", "1"}}).status, 400);

  json r = GetJson("/api/sweeps/demo/results", {{"metric", "final_val_loss"}, {"by", "kind"}});
  ASSERT_EQ(r["rows"].size(), 2u);
  EXPECT_EQ(r["rows"][0]["keys"][0], "a");
  EXPECT_EQ(r["rows"][0]["mean"], 1.0);
  EXPECT_EQ(r["rows"][1]["mean"], 2.0);
  // The failed trials' values are counted, not averaged.
  EXPECT_EQ(r["rows"][1]["n"], 17);
  EXPECT_EQ(r["rows"][1]["failed"], 3);
  EXPECT_EQ(r["rows"][1]["trials"], 20);
  EXPECT_EQ(r["rows"][1]["se"], 0.0);  // every value is 2.0
  EXPECT_EQ(r["rows"][1]["ci_low"], 2.0);
  EXPECT_EQ(r["rows"][1]["ci_high"], 2.0);
  EXPECT_EQ(r["lower_is_better"], true);
  EXPECT_EQ(r["rows"][0]["best"], true);  // 1.0 and 2.0 without spread: intervals apart
  auto bad = Get("/api/sweeps/demo/results", {{"by", "colour"}});
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.body.find("colour"), std::string::npos);
}

// compare: kind b against a, paired by seed. Seeds 0-2 are complete (b - a = 1.0 on each, no
// spread); seed 3 has running and failed trials on both sides: counted, left out.
TEST_F(ApiTest, CompareByHand) {
  json c = GetJson("/api/sweeps/demo/compare", {{"factor", "kind"}});
  EXPECT_EQ(c["baseline"], "a");
  EXPECT_EQ(c["adjustment"], "holm");
  ASSERT_EQ(c["rows"].size(), 1u) << c.dump();
  const json& r = c["rows"][0];
  EXPECT_EQ(r["value"], "b");
  EXPECT_EQ(r["test"], "paired-t");
  EXPECT_EQ(r["n"], 3);
  EXPECT_EQ(r["delta"], 1.0);
  EXPECT_EQ(r["ci_low"], 1.0);
  EXPECT_EQ(r["ci_high"], 1.0);
  EXPECT_EQ(r["p_value"], 0.0);
  EXPECT_EQ(r["seeds"], 4);
  EXPECT_EQ(r["failed"], 1);
  EXPECT_EQ(r["baseline_failed"], 1);
  EXPECT_EQ(r["left_out"], 2);
  // by p: one comparison per p, Holm over the five.
  json byp = GetJson("/api/sweeps/demo/compare", {{"factor", "kind"}, {"by", "p"}});
  EXPECT_EQ(byp["rows"].size(), 5u);
  auto bad = Get("/api/sweeps/demo/compare", {{"factor", "colour"}});
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.body.find("kind, p, seed"), std::string::npos) << bad.body;
  EXPECT_EQ(Get("/api/sweeps/nope/compare", {{"factor", "kind"}}).status, 404);
}

TEST_F(ApiTest, StaticFilesAndRoutes) {
  auto r = Get("/", {}, false);
  EXPECT_EQ(r.body, "<html>dashboard</html>");
  EXPECT_EQ(r.content_type, "text/html; charset=utf-8");
  EXPECT_EQ(Get("/../secret.txt", {}, false).status, 403);
  EXPECT_EQ(Get("/nothing.js", {}, false).status, 404);
  EXPECT_EQ(Get("/api/what").status, 404);
  json c = GetJson("/api/metrics/catalog");
  EXPECT_GT(c["metrics"].size(), 10u);
}

// The real listener: decoding, traversal over the wire, size limits, SSE.
TEST_F(ApiTest, OverHttp) {
  HttpServerOptions so;
  so.event_poll_s = 0.1;
  HttpServer server(api_.get(), so);
  auto port = server.Start("127.0.0.1:0");
  ASSERT_TRUE(port.ok()) << port.status().ToString();
  httplib::Client c("127.0.0.1", *port);
  c.set_read_timeout(5, 0);
  auto res = c.Get("/api/sweeps");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 401);
  res = c.Get("/api/sweeps", {{"Authorization", "Bearer secret-token"}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_NE(res->body.find("demo"), std::string::npos);
  for (const char* p : {"/%2e%2e/secret.txt", "/..%2fsecret.txt", "/%2E%2E/%2E%2E/etc/passwd",
                        "/../secret.txt"}) {
    res = c.Get(p);
    ASSERT_TRUE(res) << p;
    EXPECT_TRUE(res->status == 403 || res->status == 404 || res->status == 400)
        << p << " " << res->status;
    EXPECT_EQ(res->body.find("secret"), std::string::npos) << p;
  }
  res = c.Post("/api/sweeps", {{"Authorization", "Bearer secret-token"}},
               std::string(200 << 10, 'x'), "text/plain");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 413);
  res = c.Get(("/api/sweeps?x=" + std::string(20000, 'a')).c_str());
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 414);

  // SSE: the first frames arrive (a "changed" frame with the counts) with the right type.
  std::string got;
  std::string content_type;
  auto sse = c.Get("/api/events?token=secret-token",
                   [&](const httplib::Response& r) {
                     content_type = r.get_header_value("Content-Type");
                     return r.status == 200;
                   },
                   [&](const char* data, size_t n) {
                     got.append(data, n);
                     return got.find("\n\n") == std::string::npos;  // stop after one frame
                   });
  EXPECT_EQ(content_type, "text/event-stream");
  EXPECT_EQ(got.rfind("event: changed\ndata: {\"sweeps\":", 0), 0u) << got;
  res = c.Get("/api/events");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 401);
  server.Stop();
}

}  // namespace
}  // namespace ablate::server::http
