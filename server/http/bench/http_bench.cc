// API latency at dashboard scale: a sweep of --trials trials (default 10,000) with --points loss
// points each (default 1,000) plus final_val_loss, then the dashboard's heavy requests through the
// Api layer (the same code the HTTP listener calls; the socket adds a constant):
//   trial list page (sorted by loss, filtered by an axis), the ablation table, a downsampled series.
// Prints p50/p95/max per request kind. Targets: list and table p95 < 100 ms, series p95 < 50 ms.
//   ablate-http-bench [--trials N] [--points N] [--iters N] [--dir DIR]
#include <stdlib.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>

#include "http/api.h"

using namespace ablate::server;
using SteadyClock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  CLI::App app{"ablate-http-bench: HTTP API latency at dashboard scale"};
  int trials = 10000, points = 1000, iters = 50;
  std::string dir;
  app.add_option("--trials", trials);
  app.add_option("--points", points, "loss points per trial");
  app.add_option("--iters", iters, "requests per kind");
  app.add_option("--dir", dir, "database folder (default: a temp dir)");
  CLI11_PARSE(app, argc, argv);
  if (dir.empty()) {
    char tmpl[] = "/tmp/ablate_http_bench_XXXXXX";
    dir = ::mkdtemp(tmpl);
  }
  Store::Options so;
  so.path = dir + "/ablate.db";
  auto store = Store::Open(so);
  if (!store.ok()) return std::fprintf(stderr, "%s\n", store.status().message().c_str()), 1;

  auto t0 = SteadyClock::now();
  SweepRecord sweep;
  sweep.name = "bench";
  sweep.axes = {"attention.kind", "optimizer.p", "train.tokens_per_step", "seed"};
  std::vector<TrialRecord> recs;
  const char* kinds[] = {"fpa", "sagebwd"};
  const char* ps[] = {"0", "0.25", "0.5", "1"};
  const char* tps[] = {"16384", "65536"};
  for (int i = 0; i < trials; ++i) {
    TrialRecord t;
    t.config_hash = "h" + std::to_string(i);
    t.config_json = "{\"seed\":" + std::to_string(i) + "}";
    t.axes = {{"attention.kind", kinds[i % 2]}, {"optimizer.p", ps[(i / 2) % 4]},
              {"train.tokens_per_step", tps[(i / 8) % 2]}, {"seed", std::to_string(i / 16)}};
    t.order_key = i;
    t.total_steps = points;
    recs.push_back(std::move(t));
  }
  auto sub = (*store)->SubmitSweep(sweep, recs);
  if (!sub.ok()) return std::fprintf(stderr, "%s\n", sub.status().message().c_str()), 1;
  std::mt19937 rng(1);
  std::normal_distribution<double> noise(0, 0.02);
  for (const auto& t : sub->inserted) {
    std::vector<Point> pts;
    pts.reserve(points + 1);
    for (int s = 1; s <= points; ++s) pts.push_back({s, "loss", 4.0 / std::sqrt(s) + noise(rng)});
    pts.push_back({points, "final_val_loss", 3.0 + noise(rng)});
    AttemptRecord a;
    a.trial_id = t.id;
    a.attempt = 1;
    a.worker_id = "w";
    (*store)->InsertAttempt(a);
    (*store)->AppendMetrics(t.id, 1, 1, std::move(pts), [](const ablate::Status&, bool) {});
    TrialUpdate u;
    u.trial_id = t.id;
    u.state = ablate::v1::SUCCEEDED;
    u.attempts = 1;
    (*store)->UpdateTrial(u);
  }
  if (auto st = (*store)->Flush(); !st.ok()) return std::fprintf(stderr, "%s\n", st.message().c_str()), 1;
  double load_s = std::chrono::duration<double>(SteadyClock::now() - t0).count();
  std::printf("loaded %d trials x %d points in %.1f s (%s)\n", trials, points, load_s, dir.c_str());

  http::Api api(store->get(), nullptr, nullptr, {"tok", false, ""});
  auto get = [&](const std::string& path, std::multimap<std::string, std::string> params) {
    http::HttpRequest r;
    r.path = path;
    r.params = std::move(params);
    r.headers["authorization"] = "Bearer tok";
    return r;
  };
  const std::string sid = std::to_string(sub->sweep_id);
  struct Kind {
    const char* name;
    double target_ms;
    std::function<http::HttpRequest(int)> req;
  };
  std::vector<Kind> kinds_ = {
      {"trial list page (sort=loss, 50)", 100,
       [&](int i) {
         return get("/api/sweeps/" + sid + "/trials",
                    {{"sort", "loss"}, {"order", "desc"}, {"limit", "50"},
                     {"offset", std::to_string((i % 10) * 50)}});
       }},
      {"trial list filtered (axis, state)", 100,
       [&](int i) {
         return get("/api/sweeps/" + sid + "/trials",
                    {{"axis.attention.kind", kinds[i % 2]}, {"state", "succeeded"},
                     {"sort", "axis.optimizer.p"}, {"limit", "100"}});
       }},
      {"ablation table (by 3 axes)", 100,
       [&](int) {
         return get("/api/sweeps/" + sid + "/results",
                    {{"metric", "final_val_loss"},
                     {"by", "attention.kind,optimizer.p,train.tokens_per_step"}});
       }},
      {"series (1000 -> 500 points)", 50,
       [&](int i) {
         return get("/api/trials/" + std::to_string(sub->inserted[(i * 7919) % trials].id) +
                        "/series",
                    {{"name", "loss"}, {"points", "500"}});
       }},
      {"trial detail", 50,
       [&](int i) {
         return get("/api/trials/" + std::to_string(sub->inserted[(i * 104729) % trials].id), {});
       }},
  };
  std::printf("%-36s %8s %8s %8s %8s  %s\n", "request", "p50 ms", "p95 ms", "max ms", "target",
              "ok");
  bool all_ok = true;
  for (auto& k : kinds_) {
    std::vector<double> ms;
    for (int i = 0; i < iters; ++i) {
      auto r = k.req(i);
      auto s = SteadyClock::now();
      auto resp = api.Handle(r);
      ms.push_back(std::chrono::duration<double, std::milli>(SteadyClock::now() - s).count());
      if (resp.status != 200) {
        std::fprintf(stderr, "%s: HTTP %d %s\n", k.name, resp.status, resp.body.c_str());
        return 1;
      }
    }
    std::sort(ms.begin(), ms.end());
    double p50 = ms[ms.size() / 2], p95 = ms[std::min(ms.size() - 1, ms.size() * 95 / 100)];
    bool ok = p95 < k.target_ms;
    all_ok = all_ok && ok;
    std::printf("%-36s %8.2f %8.2f %8.2f %8.0f  %s\n", k.name, p50, p95, ms.back(), k.target_ms,
                ok ? "yes" : "NO");
  }
  return all_ok ? 0 : 3;
}
