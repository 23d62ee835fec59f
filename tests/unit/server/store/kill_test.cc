// Kill safety: a child process writes metric batches as fast as it can and reports each batch
// whose done-callback ran (i.e. that was acknowledged) through a pipe; the parent SIGKILLs it at
// varying moments, then checks that the database is intact and holds every acknowledged batch
// exactly once, and no batch partially. Each round restarts the writer with a replay of recent
// seqs, as a worker replays unacknowledged batches after a coordinator restart.
#include <poll.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <set>
#include <thread>

#include "test_util.h"

namespace ablate::server {
namespace {

using testing::MakeTrial;
using testing::OptionsFor;
using testing::TempDir;

constexpr int kPointsPerBatch = 50;

// Runs in the forked child; never returns.
[[noreturn]] void WriteForever(const std::string& path, int64_t trial_id, int64_t first_seq,
                               int fd) {
  auto opened = Store::Open(OptionsFor(path));
  if (!opened.ok()) _exit(3);
  std::unique_ptr<Store> store = std::move(opened).value();
  std::atomic<int> in_flight{0};
  for (int64_t seq = first_seq;; ++seq) {
    std::vector<Point> points;
    points.reserve(kPointsPerBatch);
    for (int k = 0; k < kPointsPerBatch; ++k) {
      points.push_back({seq * kPointsPerBatch + k, k % 2 == 0 ? "loss" : "lr", 1.0 / (k + 1)});
    }
    while (in_flight.load() > 64) std::this_thread::yield();  // a worker's ack window
    ++in_flight;
    store->AppendMetrics(trial_id, 1, seq, std::move(points),
                         [fd, seq, &in_flight](const Status& s, bool duplicate) {
                           if (s.ok() && !duplicate) {
                             ssize_t n = write(fd, &seq, sizeof seq);
                             if (n != sizeof seq) _exit(4);
                           }
                           --in_flight;
                         });
    if (seq % 10 == 0) {
      store->UpdateTrial({.trial_id = trial_id, .checkpoint_step = seq});
      store->AddEvent("progress", 0, trial_id, 1, "w", "seq " + std::to_string(seq));
    }
  }
}

std::string IntegrityCheck(const std::string& path) {
  sqlite3* db = nullptr;
  std::string out = "cannot open";
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK) {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, nullptr) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW) {
      out = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    }
    sqlite3_finalize(st);
  }
  sqlite3_close(db);
  return out;
}

int64_t Int(Store& store, const std::string& sql) {
  auto r = store.Query(sql);
  EXPECT_TRUE(r.ok()) << sql << ": " << r.status().ToString();
  return r.ok() && !r->rows.empty() ? r->rows[0][0].i : -1;
}

TEST(StoreKillTest, SigkillLosesNoAcknowledgedBatch) {
  TempDir dir;
  const std::string path = dir.File("kill.db");
  int64_t trial_id = 0;
  {
    auto store = Store::Open(OptionsFor(path));
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    auto sub = (*store)->SubmitSweep(SweepRecord{.name = "kill"}, {MakeTrial("t")});
    ASSERT_TRUE(sub.ok());
    trial_id = sub->inserted[0].id;
  }

  std::set<int64_t> acked;  // over all rounds
  int64_t first_seq = 1;
  // Delays after the first acknowledgement: early (in the first transactions), mid-stream, later.
  for (int delay_ms : {0, 3, 17, 40, 90, 150}) {
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(fds[0]);
      WriteForever(path, trial_id, first_seq, fds[1]);
    }
    close(fds[1]);
    int64_t round_acks = 0;
    auto read_acks = [&](int timeout_ms) {
      pollfd p{fds[0], POLLIN, 0};
      if (poll(&p, 1, timeout_ms) <= 0) return false;
      int64_t seq;
      ssize_t n = read(fds[0], &seq, sizeof seq);
      if (n != sizeof seq) return false;  // EOF (child gone) or a torn read: stop
      acked.insert(seq);
      ++round_acks;
      return true;
    };
    ASSERT_TRUE(read_acks(10000)) << "the child acknowledged nothing";
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(delay_ms);
    while (std::chrono::steady_clock::now() < deadline) read_acks(1);
    ASSERT_EQ(kill(pid, SIGKILL), 0);
    int wstatus = 0;
    ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(wstatus)) << "child exited by itself with " << WEXITSTATUS(wstatus);
    while (read_acks(0)) {
    }  // whatever the child wrote before it died
    close(fds[0]);

    ASSERT_EQ(IntegrityCheck(path), "ok") << "after a kill " << delay_ms << " ms in";
    auto store = Store::Open(OptionsFor(path));
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    Store& s = **store;
    const std::string where = " FROM metric_batches WHERE trial_id = " + std::to_string(trial_id);
    // Every acknowledged batch is there with all its points...
    for (int64_t seq : acked) {
      ASSERT_EQ(
          Int(s, "SELECT count(*)" + where + " AND attempt = 1 AND seq = " + std::to_string(seq)),
          1)
          << "acknowledged batch " << seq << " is missing";
    }
    // ...and no stored batch is partial or stored twice (metrics' key would forbid the latter;
    // the count per batch checks both).
    EXPECT_EQ(Int(s, "SELECT count(*) FROM metric_batches b LEFT JOIN (SELECT step / " +
                         std::to_string(kPointsPerBatch) +
                         " AS seq, count(*) AS n FROM metrics WHERE attempt = 1 GROUP BY 1) m "
                         "ON m.seq = b.seq WHERE b.points != coalesce(m.n, 0)"),
              0);
    EXPECT_EQ(Int(s, "SELECT count(*) FROM metrics"),
              Int(s, "SELECT sum(points) FROM metric_batches"));
    const int64_t stored = Int(s, "SELECT max(seq)" + where);
    EXPECT_GE(stored, *acked.rbegin());
    // The next writer replays the last 20 seqs (duplicates) before new ones.
    first_seq = std::max<int64_t>(1, stored - 20);
    std::cout << "kill after " << delay_ms << " ms: " << round_acks << " batches acknowledged, "
              << stored << " stored in total\n";
  }
  EXPECT_GT(acked.size(), 6u);
}

}  // namespace
}  // namespace ablate::server
