// ablate-store-bench: sustained metric ingestion and read latency of the store (server/store).
//
//   ablate-store-bench [--trials 10000] [--points 1000] [--batch 250] [--producers 64]
//                      [--window 8] [--reps 30] [--sync normal|full] [--wal-pages N]
//                      [--dir DIR] [--keep]
//   ablate-store-bench --layouts [--layout-points 2000000]
//
// Ingestion: one sweep of --trials trials (axes attention.kind x optimizer.p x
// train.tokens_per_step x seed); --producers threads each own every producers-th trial and append
// its --points points (names loss, lr, grad_norm, val_loss; steps 0, 1, ...) in batches of
// --batch points, keeping at most --window batches unacknowledged (as a worker does). Reports the
// overall rate, the slowest and median full second, and checks that count(*) equals what was sent.
// While ingesting, a reader thread times Results() every 250 ms (WAL: readers beside the writer).
// Reads: Results (by two axes), GetTrials, GetSeries and ListSweeps on the filled database,
// p50/p95/max over --reps calls. --layouts compares candidate metrics-table layouts with raw SQLite
// (the measurement behind the schema choice). Output: markdown tables.
#include <sqlite3.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "store/store.h"

namespace {

using ablate::server::Point;
using ablate::server::Store;
using Clock = std::chrono::steady_clock;

struct Args {
  int trials = 10000;
  int points = 1000;
  int batch = 250;
  int producers = 64;
  int window = 8;
  int reps = 30;
  bool sync_full = false;
  std::string dir;
  bool keep = false;
  bool layouts = false;
  int64_t layout_points = 2000000;
  int wal_pages = 0;  // 0: the store's default
};

[[noreturn]] void Usage(const char* msg) {
  std::fprintf(stderr,
               "ablate-store-bench: %s\nusage: ablate-store-bench [--trials N] [--points N] "
               "[--batch N] [--producers N] [--window N] [--reps N] [--sync normal|full] "
               "[--wal-pages N] [--dir DIR] [--keep] | --layouts [--layout-points N]\n",
               msg);
  std::exit(2);
}

Args Parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) Usage(("missing value after " + k).c_str());
      return argv[++i];
    };
    auto num = [&]() -> int64_t {
      std::string v = next();
      char* end = nullptr;
      int64_t n = std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || n <= 0) {
        Usage((k + ": expected a positive integer, got '" + v + "'").c_str());
      }
      return n;
    };
    if (k == "--trials") {
      a.trials = num();
    } else if (k == "--points") {
      a.points = num();
    } else if (k == "--batch") {
      a.batch = num();
    } else if (k == "--producers") {
      a.producers = num();
    } else if (k == "--window") {
      a.window = num();
    } else if (k == "--reps") {
      a.reps = num();
    } else if (k == "--layout-points") {
      a.layout_points = num();
    } else if (k == "--wal-pages") {
      a.wal_pages = num();
    } else if (k == "--dir") {
      a.dir = next();
    } else if (k == "--keep") {
      a.keep = true;
    } else if (k == "--layouts") {
      a.layouts = true;
    } else if (k == "--sync") {
      std::string v = next();
      if (v != "normal" && v != "full") Usage("--sync: expected normal or full");
      a.sync_full = v == "full";
    } else {
      Usage(("unknown option " + k).c_str());
    }
  }
  return a;
}

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct Latency {
  double p50, p95, max;
};
Latency Percentiles(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  auto at = [&](double q) {
    return ms[std::min(ms.size() - 1, size_t(q * (ms.size() - 1) + 0.5))];
  };
  return {at(0.5), at(0.95), ms.back()};
}

template <typename F>
Latency Time(int reps, F&& f) {
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    auto t0 = Clock::now();
    f();
    ms.push_back(Seconds(t0, Clock::now()) * 1e3);
  }
  return Percentiles(ms);
}

void Die(const std::string& what, const ablate::Status& s) {
  std::fprintf(stderr, "ablate-store-bench: %s: %s\n", what.c_str(), s.ToString().c_str());
  std::exit(1);
}

std::string MakeDir(const Args& args) {
  if (!args.dir.empty()) {
    std::filesystem::create_directories(args.dir);
    return args.dir;
  }
  std::string tmpl =
      (std::filesystem::temp_directory_path() / "ablate-store-bench-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) Die("mkdtemp", ablate::Internal(std::strerror(errno)));
  return tmpl;
}

// A counting semaphore for the per-producer window of unacknowledged batches.
class Window {
 public:
  explicit Window(int n) : free_(n) {}
  void Acquire() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return free_ > 0; });
    --free_;
  }
  void Release() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++free_;
    }
    cv_.notify_one();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int free_;
};

int RunStore(const Args& args) {
  const std::string dir = MakeDir(args);
  Store::Options opt;
  opt.path = dir + "/bench.db";
  opt.synchronous_full = args.sync_full;
  opt.query_timeout_ms = 120000;
  if (args.wal_pages > 0) opt.wal_autocheckpoint_pages = args.wal_pages;
  auto opened = Store::Open(opt);
  if (!opened.ok()) Die("open", opened.status());
  std::unique_ptr<Store> store = std::move(opened).value();

  // The sweep.
  const char* kinds[] = {"fpa", "sagebwd"};
  const char* ps[] = {"0", "0.25", "0.5", "1"};
  const char* tps[] = {"16384", "65536"};
  ablate::server::SweepRecord sweep;
  sweep.name = "bench";
  sweep.axes = {"attention.kind", "optimizer.p", "train.tokens_per_step", "seed"};
  std::vector<ablate::server::TrialRecord> trials(args.trials);
  for (int i = 0; i < args.trials; ++i) {
    auto& t = trials[i];
    t.config_hash = "h" + std::to_string(i);
    t.config_json = "{\"i\":" + std::to_string(i) + "}";
    t.axes = {{"attention.kind", kinds[i % 2]},
              {"optimizer.p", ps[(i / 2) % 4]},
              {"train.tokens_per_step", tps[(i / 8) % 2]},
              {"seed", std::to_string(i / 16)}};
    t.order_key = i;
    t.total_steps = args.points / 4;
  }
  auto t_submit = Clock::now();
  auto submitted = store->SubmitSweep(sweep, trials);
  if (!submitted.ok()) Die("submit", submitted.status());
  const double submit_s = Seconds(t_submit, Clock::now());
  std::vector<int64_t> ids;
  for (const auto& t : submitted->inserted) ids.push_back(t.id);
  const int64_t sweep_id = submitted->sweep_id;
  for (int i = 0; i < args.trials; ++i) {
    ablate::server::AttemptRecord a;
    a.trial_id = ids[i];
    a.attempt = 1;
    a.worker_id = "w" + std::to_string(i % 64);
    store->InsertAttempt(a);
  }
  if (auto s = store->Flush(); !s.ok()) Die("insert attempts", s);

  // Ingestion.
  const char* names[] = {"loss", "lr", "grad_norm", "val_loss"};
  std::atomic<int64_t> sent{0}, failed{0};
  std::atomic<bool> ingesting{true};
  std::vector<double> per_second;  // points committed in each full second
  std::thread monitor([&] {
    int64_t last = store->stats().points_inserted;
    auto next = Clock::now() + std::chrono::seconds(1);
    while (ingesting.load()) {
      std::this_thread::sleep_until(next);
      next += std::chrono::seconds(1);
      if (!ingesting.load()) break;  // a partial second: not counted
      int64_t now = store->stats().points_inserted;
      per_second.push_back(double(now - last));
      last = now;
    }
  });
  std::vector<double> results_during_ms;
  std::thread reader([&] {
    while (ingesting.load()) {
      auto t0 = Clock::now();
      auto r = store->Results(sweep_id, "val_loss", {"attention.kind", "optimizer.p"});
      if (!r.ok()) Die("results during ingest", r.status());
      results_during_ms.push_back(Seconds(t0, Clock::now()) * 1e3);
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
  });

  auto t0 = Clock::now();
  std::vector<std::thread> producers;
  for (int p = 0; p < args.producers; ++p) {
    producers.emplace_back([&, p] {
      Window window(args.window);
      for (int i = p; i < args.trials; i += args.producers) {
        int64_t seq = 0;
        std::vector<Point> batch;
        for (int k = 0; k < args.points; ++k) {
          const int64_t step = k / 4;
          batch.push_back({step, names[k % 4], 3.0 / (1.0 + step * 0.01) + 0.001 * (i % 97)});
          if (static_cast<int>(batch.size()) == args.batch || k + 1 == args.points) {
            const int64_t n = batch.size();
            window.Acquire();
            store->AppendMetrics(ids[i], 1, ++seq, std::move(batch),
                                 [&, n, &window = window](const ablate::Status& s, bool dup) {
                                   if (s.ok() && !dup) {
                                     sent += n;
                                   } else {
                                     ++failed;
                                   }
                                   window.Release();
                                 });
            batch.clear();
          }
        }
      }
      // The window must drain before it goes out of scope (callbacks reference it).
      for (int k = 0; k < args.window; ++k) window.Acquire();
    });
  }
  for (auto& t : producers) t.join();
  if (auto s = store->Flush(); !s.ok()) Die("flush", s);
  const double ingest_s = Seconds(t0, Clock::now());
  ingesting = false;
  monitor.join();
  reader.join();

  const int64_t expected = int64_t(args.trials) * args.points;
  auto counted = store->Query("SELECT count(*) FROM metrics");
  if (!counted.ok()) Die("count", counted.status());
  const int64_t in_db = counted->rows[0][0].i;
  auto stats = store->stats();

  // Reads on the filled database.
  Latency results = Time(args.reps, [&] {
    auto r = store->Results(sweep_id, "val_loss", {"attention.kind", "optimizer.p"});
    if (!r.ok() || r->size() != 8) Die("results", r.ok() ? ablate::Internal("rows") : r.status());
  });
  Latency results_all = Time(args.reps, [&] {
    auto r = store->Results(sweep_id, "val_loss",
                            {"attention.kind", "optimizer.p", "train.tokens_per_step", "seed"});
    if (!r.ok()) Die("results by 4 axes", r.status());
  });
  Latency trials_l = Time(args.reps, [&] {
    auto r = store->GetTrials(sweep_id);
    if (!r.ok() || static_cast<int>(r->size()) != args.trials) Die("get trials", r.status());
  });
  Latency series = Time(args.reps, [&] {
    auto r = store->GetSeries(ids[args.trials / 2], "loss");
    if (!r.ok() || static_cast<int>(r->size()) != args.points / 4) Die("series", r.status());
  });
  Latency sweeps = Time(args.reps, [&] {
    auto r = store->ListSweeps();
    if (!r.ok()) Die("list sweeps", r.status());
  });
  Latency during =
      Percentiles(results_during_ms.empty() ? std::vector<double>{0} : results_during_ms);

  std::error_code ec;
  const double db_mb = std::filesystem::file_size(opt.path, ec) / 1e6;

  std::sort(per_second.begin(), per_second.end());
  const double rate = in_db / ingest_s;
  std::printf("## ablate-store-bench\n\n");
  std::printf(
      "%d trials x %d points, batches of %d, %d producers (window %d), synchronous=%s, "
      "SQLite %s, %u hardware threads\n\n",
      args.trials, args.points, args.batch, args.producers, args.window,
      args.sync_full ? "FULL" : "NORMAL", sqlite3_libversion(),
      std::thread::hardware_concurrency());
  std::printf("| ingestion | value |\n|---|---|\n");
  std::printf("| points sent / in the table | %lld / %lld (%s) |\n", (long long)expected,
              (long long)in_db, in_db == expected && failed == 0 ? "nothing lost" : "MISMATCH");
  std::printf("| wall time | %.2f s |\n", ingest_s);
  std::printf("| overall rate | %.0f points/s |\n", rate);
  if (!per_second.empty()) {
    std::printf("| slowest full second | %.0f points/s |\n", per_second.front());
    std::printf("| median full second | %.0f points/s |\n", per_second[per_second.size() / 2]);
  }
  std::printf("| commits / ops | %lld / %lld (%.1f ops, %.0f points per commit) |\n",
              (long long)stats.commits, (long long)stats.ops,
              double(stats.ops) / std::max<int64_t>(1, stats.commits),
              double(stats.points_inserted) / std::max<int64_t>(1, stats.commits));
  std::printf("| SubmitSweep of %d trials | %.1f ms |\n", args.trials, submit_s * 1e3);
  std::printf("| database file | %.0f MB |\n\n", db_mb);
  std::printf("| read (%d calls) | p50 ms | p95 ms | max ms |\n|---|---|---|---|\n", args.reps);
  auto row = [](const char* name, Latency l) {
    std::printf("| %s | %.2f | %.2f | %.2f |\n", name, l.p50, l.p95, l.max);
  };
  row("Results by 2 axes", results);
  row("Results by 4 axes (every trial its own group)", results_all);
  row("Results by 2 axes, during ingestion", during);
  row("GetTrials (all trials)", trials_l);
  row("GetSeries (one trial, one metric)", series);
  row("ListSweeps", sweeps);

  store.reset();
  if (!args.keep && args.dir.empty()) std::filesystem::remove_all(dir, ec);
  return in_db == expected && failed == 0 ? 0 : 1;
}

// ---- --layouts: raw SQLite comparison of metrics-table layouts ----------------------------------

struct Layout {
  const char* name;
  const char* schema;
  const char* insert;  // ?1 trial, ?2 attempt, ?3 step, ?4 name (text or id), ?5 value
  const char* series;  // ?1 trial, ?2 name
  bool name_ids;
};

void Check(int rc, sqlite3* db, const char* what) {
  if (rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW) {
    std::fprintf(stderr, "ablate-store-bench: %s: %s\n", what, sqlite3_errmsg(db));
    std::exit(1);
  }
}

int RunLayouts(const Args& args) {
  const std::string dir = MakeDir(args);
  const Layout layouts[] = {
      {"rowid table + index (trial_id, name, step)",
       "CREATE TABLE metrics(trial_id INTEGER, attempt INTEGER, step INTEGER, name TEXT, value "
       "REAL); CREATE INDEX m_series ON metrics(trial_id, name, step);",
       "INSERT INTO metrics VALUES(?1, ?2, ?3, ?4, ?5)",
       "SELECT step, value FROM metrics WHERE trial_id = ?1 AND name = ?2 ORDER BY step", false},
      {"WITHOUT ROWID, PK (trial_id, name, step, attempt) [chosen]",
       "CREATE TABLE metrics(trial_id INTEGER, attempt INTEGER, step INTEGER, name TEXT, value "
       "REAL, PRIMARY KEY(trial_id, name, step, attempt)) WITHOUT ROWID;",
       "INSERT OR REPLACE INTO metrics VALUES(?1, ?2, ?3, ?4, ?5)",
       "SELECT step, value FROM metrics WHERE trial_id = ?1 AND name = ?2 ORDER BY step, attempt",
       false},
      {"WITHOUT ROWID, PK (trial_id, attempt, step, name)",
       "CREATE TABLE metrics(trial_id INTEGER, attempt INTEGER, step INTEGER, name TEXT, value "
       "REAL, PRIMARY KEY(trial_id, attempt, step, name)) WITHOUT ROWID;",
       "INSERT OR REPLACE INTO metrics VALUES(?1, ?2, ?3, ?4, ?5)",
       "SELECT step, value FROM metrics WHERE trial_id = ?1 AND name = ?2 ORDER BY step", false},
      {"WITHOUT ROWID, integer name ids (metric_names table + view)",
       "CREATE TABLE metric_points(trial_id INTEGER, name_id INTEGER, step INTEGER, attempt "
       "INTEGER, value REAL, PRIMARY KEY(trial_id, name_id, step, attempt)) WITHOUT ROWID;",
       "INSERT OR REPLACE INTO metric_points VALUES(?1, ?4, ?3, ?2, ?5)",
       "SELECT step, value FROM metric_points WHERE trial_id = ?1 AND name_id = ?2 ORDER BY step",
       true},
  };
  const char* names[] = {"loss", "lr", "grad_norm", "val_loss"};
  const int kTrialsAtOnce = 64, kBatch = 250, kTxnPoints = 20000;
  std::printf(
      "## metrics-table layouts (raw SQLite, one thread, %lld points, transactions of %d "
      "points, %d trials interleaved)\n\n",
      (long long)args.layout_points, kTxnPoints, kTrialsAtOnce);
  std::printf(
      "| layout | insert points/s | file MB | series read (250 points) ms |\n"
      "|---|---|---|---|\n");
  int n = 0;
  for (const Layout& l : layouts) {
    const std::string path = dir + "/layout" + std::to_string(n++) + ".db";
    sqlite3* db = nullptr;
    Check(sqlite3_open(path.c_str(), &db), db, "open");
    Check(sqlite3_exec(db,
                       "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; "
                       "PRAGMA cache_size=-65536;",
                       nullptr, nullptr, nullptr),
          db, "pragmas");
    Check(sqlite3_exec(db, l.schema, nullptr, nullptr, nullptr), db, "schema");
    sqlite3_stmt* ins = nullptr;
    Check(sqlite3_prepare_v2(db, l.insert, -1, &ins, nullptr), db, "prepare insert");
    // Points arrive as batches of kBatch points from kTrialsAtOnce trials in turn, the way 64
    // workers' reports interleave in the writer's queue.
    auto t0 = Clock::now();
    int64_t done = 0, step_base = 0, trial_base = 0;
    Check(sqlite3_exec(db, "BEGIN", nullptr, nullptr, nullptr), db, "begin");
    int64_t in_txn = 0;
    while (done < args.layout_points) {
      for (int t = 0; t < kTrialsAtOnce && done < args.layout_points; ++t) {
        for (int k = 0; k < kBatch; ++k, ++done) {
          sqlite3_bind_int64(ins, 1, trial_base + t);
          sqlite3_bind_int64(ins, 2, 1);
          sqlite3_bind_int64(ins, 3, step_base + k / 4);
          if (l.name_ids) {
            sqlite3_bind_int64(ins, 4, k % 4);
          } else {
            sqlite3_bind_text(ins, 4, names[k % 4], -1, SQLITE_STATIC);
          }
          sqlite3_bind_double(ins, 5, 1.0 / (k + 1));
          Check(sqlite3_step(ins), db, "insert");
          sqlite3_reset(ins);
        }
        in_txn += kBatch;
        if (in_txn >= kTxnPoints) {
          Check(sqlite3_exec(db, "COMMIT; BEGIN", nullptr, nullptr, nullptr), db, "commit");
          in_txn = 0;
        }
      }
      step_base += kBatch / 4;
      if (step_base >= 250) {  // 1,000 points per trial, then the next 64 trials
        step_base = 0;
        trial_base += kTrialsAtOnce;
      }
    }
    Check(sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr), db, "commit");
    const double secs = Seconds(t0, Clock::now());
    sqlite3_finalize(ins);

    sqlite3_stmt* sel = nullptr;
    Check(sqlite3_prepare_v2(db, l.series, -1, &sel, nullptr), db, "prepare series");
    std::vector<double> ms;
    for (int r = 0; r < 50; ++r) {
      auto s0 = Clock::now();
      sqlite3_bind_int64(sel, 1, (r * 37) % std::max<int64_t>(1, trial_base));
      if (l.name_ids) {
        sqlite3_bind_int64(sel, 2, 0);
      } else {
        sqlite3_bind_text(sel, 2, "loss", -1, SQLITE_STATIC);
      }
      while (sqlite3_step(sel) == SQLITE_ROW) {
      }
      sqlite3_reset(sel);
      ms.push_back(Seconds(s0, Clock::now()) * 1e3);
    }
    sqlite3_finalize(sel);
    Check(sqlite3_exec(db, "PRAGMA wal_checkpoint(TRUNCATE)", nullptr, nullptr, nullptr), db,
          "checkpoint");
    sqlite3_close(db);
    std::error_code ec;
    std::printf("| %s | %.0f | %.0f | %.3f |\n", l.name, args.layout_points / secs,
                std::filesystem::file_size(path, ec) / 1e6, Percentiles(ms).p50);
  }
  std::error_code ec;
  if (!args.keep && args.dir.empty()) std::filesystem::remove_all(dir, ec);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args = Parse(argc, argv);
  return args.layouts ? RunLayouts(args) : RunStore(args);
}
