// Coordinator benchmark: the real store, scheduler and gRPC services on loopback, driven by many
// concurrent lightweight protocol clients (each a WorkerService stream that answers assignments
// instantly). Measures
//   1. assignments per second: a sweep of N trials, each finished by its client as soon as assigned;
//   2. metric points ingested per second into SQLite: a sweep of N trials whose clients each report
//      P points (in batches) and finish; every point is acknowledged after its commit, and the
//      database is counted afterwards (nothing lost);
//   3. latency of status (GetSweep), results (Results), compare (Compare) and export (Export) on
//      that sweep (N trials x P points).
// Prints a markdown table. Targets: >= 2,000 assignments/s, >= 500,000 points/s, status, results
// and compare p95 < 100 ms.
//   ablate-coordinator-bench [--trials 10000] [--points 1000] [--clients 32] [--slots 8] [--dir D]
#include <grpcpp/grpcpp.h>
#include <sqlite3.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "ablate/token.h"
#include "rpc/services.h"
#include "scheduler/scheduler.h"
#include "store/store.h"

namespace ablate::server {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Totals {
  std::atomic<int64_t> assignments{0};
  std::atomic<int64_t> finished{0};
  std::atomic<int64_t> points_acked{0};
};

// One lightweight worker: registers with `slots` CPU slots; for every assignment sends `points`
// metric points in batches of `batch` and a FINISHED event; counts acknowledged points.
void RunClient(const std::string& addr, const std::string& token, int id, int slots, int points,
               int batch, grpc::ClientContext* ctx, Totals* totals) {
  auto channel = grpc::CreateChannel(addr, grpc::InsecureChannelCredentials());
  auto stub = v1::WorkerService::NewStub(channel);
  ctx->AddMetadata(kAuthMetadataKey, BearerValue(token));
  auto stream = stub->Connect(ctx);
  v1::WorkerMessage reg;
  reg.mutable_register_()->set_worker_id("bench-" + std::to_string(id));
  reg.mutable_register_()->set_hostname("bench");
  reg.mutable_register_()->set_cpu_slots(slots);
  stream->Write(reg);
  const char* names[] = {"loss", "lr", "grad_norm", "tokens_per_s", "mfu",
                         "update_rms_spectral", "update_rms_adamw", "val_loss", "p", "step_time_s"};
  std::map<std::pair<int64_t, int64_t>, int> batch_points;  // (trial, seq) -> points
  v1::CoordinatorMessage m;
  while (stream->Read(&m)) {
    if (m.has_assign()) {
      totals->assignments++;
      const auto& a = m.assign();
      int64_t seq = 0;
      for (int sent = 0; sent < points;) {
        v1::WorkerMessage w;
        auto* b = w.mutable_metrics();
        b->set_trial_id(a.trial_id());
        b->set_attempt(a.attempt());
        b->set_seq(++seq);
        int n = std::min(batch, points - sent);
        for (int k = 0; k < n; ++k, ++sent) {
          auto* p = b->add_points();
          p->set_step(sent / 10);
          p->set_name(sent + 1 == points ? "final_val_loss" : names[sent % 10]);
          p->set_value(1.0 + 1e-3 * (a.trial_id() % 97) + 1e-6 * sent);
        }
        batch_points[{a.trial_id(), seq}] = n;
        stream->Write(w);
      }
      v1::WorkerMessage e;
      auto* ev = e.mutable_event();
      ev->set_trial_id(a.trial_id());
      ev->set_attempt(a.attempt());
      ev->set_seq(++seq);
      ev->set_kind(v1::TrialEvent::FINISHED);
      ev->set_status("ok");
      stream->Write(e);
    } else if (m.has_ack()) {
      auto it = batch_points.find({m.ack().trial_id(), m.ack().seq()});
      if (it != batch_points.end()) {
        totals->points_acked += it->second;
        batch_points.erase(it);
      } else {
        totals->finished++;
      }
    }
  }
}

int64_t Count(const std::string& db_path, const std::string& sql) {
  sqlite3* db = nullptr;
  sqlite3_open_v2(db_path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr);
  sqlite3_stmt* st = nullptr;
  int64_t n = -1;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK &&
      sqlite3_step(st) == SQLITE_ROW) {
    n = sqlite3_column_int64(st, 0);
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  return n;
}

std::vector<TrialRecord> Trials(const std::string& sweep, int n) {
  std::vector<TrialRecord> out;
  for (int i = 0; i < n; ++i) {
    TrialRecord r;
    r.config_hash = sweep + "-" + std::to_string(i);
    r.config_json = "{\"i\":" + std::to_string(i) + "}";
    r.axes = {{"group", std::to_string(i % 8)}, {"seed", std::to_string(i % 3)}};
    r.order_key = i;
    r.cpu_slots = 1;
    r.max_attempts = 3;
    r.total_steps = 100;
    out.push_back(r);
  }
  return out;
}

struct Phase {
  double seconds = 0;
  int64_t assignments = 0;
  int64_t points = 0;
};

Phase RunPhase(const std::string& addr, const std::string& token, Scheduler* sched,
               const std::string& sweep_name, int trials, int points, int clients, int slots,
               int batch) {
  SweepRecord s;
  s.name = sweep_name;
  s.cpu_slots = 1;
  s.axes = {"group", "seed"};
  if (!sched->Submit(s, Trials(sweep_name, trials)).ok()) std::abort();
  Totals totals;
  auto t0 = Clock::now();
  std::vector<std::thread> threads;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  for (int c = 0; c < clients; ++c) contexts.push_back(std::make_unique<grpc::ClientContext>());
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      RunClient(addr, token, c + clients * int(sweep_name.size()), slots, points, batch,
                contexts[c].get(), &totals);
    });
  }
  while (totals.finished < trials) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  Phase p;
  p.seconds = Since(t0);
  p.assignments = totals.assignments;
  p.points = totals.points_acked;
  for (auto& ctx : contexts) ctx->TryCancel();
  for (auto& t : threads) t.join();
  return p;
}

std::pair<double, double> Latency(std::function<bool()> call, int n) {
  std::vector<double> ms;
  for (int i = 0; i < n; ++i) {
    auto t = Clock::now();
    if (!call()) std::abort();
    ms.push_back(Since(t) * 1000);
  }
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms[std::min(ms.size() - 1, size_t(ms.size() * 0.95))]};
}

}  // namespace
}  // namespace ablate::server

int main(int argc, char** argv) {
  using namespace ablate::server;
  CLI::App app{"ablate coordinator benchmark"};
  int trials = 10000, points = 1000, clients = 32, slots = 8, batch = 1000;
  std::string dir;
  app.add_option("--trials", trials);
  app.add_option("--points", points, "metric points per trial");
  app.add_option("--clients", clients, "concurrent worker streams");
  app.add_option("--slots", slots, "CPU slots per client");
  app.add_option("--batch", batch, "points per MetricBatch");
  app.add_option("--dir", dir, "scratch folder (default: a new one under /tmp)");
  CLI11_PARSE(app, argc, argv);
  if (dir.empty()) {
    char tmpl[] = "/tmp/ablate_bench_XXXXXX";
    dir = ::mkdtemp(tmpl);
  }
  Store::Options so;
  so.path = dir + "/ablate.db";
  auto store = Store::Open(so);
  if (!store.ok()) {
    std::fprintf(stderr, "%s\n", store.status().ToString().c_str());
    return 1;
  }
  Scheduler sched(store->get(), ablate::SystemClock(), SchedulerOptions{});
  ServiceOptions svc;
  svc.token = "bench-token-0123456789abcdef";
  WorkerServiceImpl ws(&sched, svc);
  ControlServiceImpl cs(&sched, store->get(), svc);
  grpc::ServerBuilder b;
  int port = 0;
  b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  b.RegisterService(&ws);
  b.RegisterService(&cs);
  b.SetMaxReceiveMessageSize(64 << 20);
  auto server = b.BuildAndStart();
  std::string addr = "127.0.0.1:" + std::to_string(port);

  Phase assign = RunPhase(addr, svc.token, &sched, "bench-assign", trials, 0, clients, slots, batch);
  std::fprintf(stderr, "assignments: %lld in %.2f s\n", (long long)assign.assignments, assign.seconds);
  Phase ingest = RunPhase(addr, svc.token, &sched, "bench-metrics", trials, points, clients, slots,
                          batch);
  std::fprintf(stderr, "points: %lld acked in %.2f s\n", (long long)ingest.points, ingest.seconds);
  (void)(*store)->Flush();
  int64_t stored = Count(so.path,
                         "SELECT count(*) FROM metrics m JOIN trials t ON t.id = m.trial_id "
                         "JOIN sweeps s ON s.id = t.sweep_id WHERE s.name = 'bench-metrics'");

  auto stub = ablate::v1::ControlService::NewStub(
      grpc::CreateChannel(addr, grpc::InsecureChannelCredentials()));
  auto authorize = [&](grpc::ClientContext& ctx) {
    ctx.AddMetadata(ablate::kAuthMetadataKey, ablate::BearerValue(svc.token));
  };
  auto status = Latency(
      [&] {
        grpc::ClientContext ctx;
        authorize(ctx);
        ablate::v1::GetSweepRequest req;
        req.set_sweep("bench-metrics");
        ablate::v1::GetSweepResponse resp;
        return stub->GetSweep(&ctx, req, &resp).ok() && resp.trials_size() == trials;
      },
      30);
  auto results = Latency(
      [&] {
        grpc::ClientContext ctx;
        authorize(ctx);
        ablate::v1::ResultsRequest req;
        req.set_sweep("bench-metrics");
        req.add_by("group");
        ablate::v1::ResultsResponse resp;
        return stub->Results(&ctx, req, &resp).ok() && resp.rows_size() == 8;
      },
      30);
  // Each of 7 groups against group 0, paired by seed (3 seeds, ~417 trials averaged per seed).
  auto compare = Latency(
      [&] {
        grpc::ClientContext ctx;
        authorize(ctx);
        ablate::v1::CompareRequest req;
        req.set_sweep("bench-metrics");
        req.set_factor("group");
        ablate::v1::CompareResponse resp;
        return stub->Compare(&ctx, req, &resp).ok() && resp.rows_size() == 7 &&
               resp.rows(0).n() == 3;
      },
      30);
  // The wide export: one row per trial with its latest value of each of the 11 metrics.
  auto exported = Latency(
      [&] {
        grpc::ClientContext ctx;
        authorize(ctx);
        ablate::v1::ExportRequest req;
        req.set_sweep("bench-metrics");
        req.set_format("csv");
        auto reader = stub->Export(&ctx, req);
        ablate::v1::ExportChunk chunk;
        int64_t lines = 0;
        while (reader->Read(&chunk)) {
          lines += std::count(chunk.data().begin(), chunk.data().end(), '\n');
        }
        return reader->Finish().ok() && lines == trials + 1;
      },
      10);

  char cpu[256] = "unknown CPU";
  if (FILE* f = std::fopen("/proc/cpuinfo", "r")) {
    char line[512];
    while (std::fgets(line, sizeof line, f)) {
      if (std::strncmp(line, "model name", 10) == 0) {
        std::snprintf(cpu, sizeof cpu, "%s", std::strchr(line, ':') + 2);
        cpu[std::strcspn(cpu, "\n")] = 0;
        break;
      }
    }
    std::fclose(f);
  }
  std::printf("# Coordinator benchmark (ablate-coordinator-bench)\n\n");
  std::printf("Machine: %s, %ld cores. %d concurrent worker streams x %d CPU slots on loopback,\n",
              cpu, sysconf(_SC_NPROCESSORS_ONLN), clients, slots);
  std::printf("real gRPC + scheduler + SQLite store (WAL) in one process; %d trials per sweep, %d "
              "points per trial in batches of %d.\n\n",
              trials, points, batch);
  std::printf("| measure | result | target |\n|---|---:|---:|\n");
  std::printf("| assignments/s (assign + finish, %d trials) | %.0f | >= 2,000 |\n", trials,
              assign.assignments / assign.seconds);
  std::printf("| metric points/s ingested (acked after commit) | %.0f | >= 500,000 |\n",
              ingest.points / ingest.seconds);
  std::printf("| points sent / acked / stored in SQLite | %lld / %lld / %lld | equal |\n",
              (long long)trials * points, (long long)ingest.points, (long long)stored);
  std::printf("| status (GetSweep, %d trials) p50 / p95 | %.1f / %.1f ms | p95 < 100 ms |\n", trials,
              status.first, status.second);
  std::printf("| results (8 groups over %d trials x %d points) p50 / p95 | %.1f / %.1f ms | p95 < 100 ms |\n",
              trials, points, results.first, results.second);
  std::printf("| compare (7 levels x 3 seeds over %d trials) p50 / p95 | %.1f / %.1f ms | p95 < 100 ms |\n",
              trials, compare.first, compare.second);
  std::printf("| export csv (%d rows) p50 / p95 | %.1f / %.1f ms | |\n", trials, exported.first,
              exported.second);
  cs.Shutdown();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return stored == int64_t(trials) * points ? 0 : 1;
}
