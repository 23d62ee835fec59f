#include "commands/watch.h"

#include <grpcpp/grpcpp.h>
#include <time.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

#include "exit_codes.h"
#include "render/progress.h"

namespace ablate::cli {
namespace {

constexpr int kOverallBar = 30;
constexpr int kTrialBar = 10;
constexpr int kMaxListedFailures = 20;
// Tries of the first Watch call while the coordinator is unreachable (backoff 0.25, 0.5, 1 s).
constexpr int kFirstContactAttempts = 4;

// Cancels a stream that stays silent longer than its limit. The coordinator sends a snapshot at
// least every five intervals, so silence past that means a coordinator that is frozen or cut off
// without a reset (the connection stays open and Read would wait for good).
class SilenceWatchdog {
 public:
  SilenceWatchdog(grpc::ClientContext* context, double limit_s)
      : context_(context), limit_(limit_s), thread_([this] { Run(); }) {}
  ~SilenceWatchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  // A message arrived; the next may take `limit_s`.
  void Heard(double limit_s) {
    std::lock_guard<std::mutex> lock(mu_);
    last_ = std::chrono::steady_clock::now();
    limit_ = limit_s;
  }
  bool fired() const { return fired_; }
  double limit_s() const {
    std::lock_guard<std::mutex> lock(mu_);
    return limit_;
  }

 private:
  void Run() {
    std::unique_lock<std::mutex> lock(mu_);
    auto deadline = [this] {
      return last_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                         std::chrono::duration<double>(limit_));
    };
    while (!stop_) {
      if (cv_.wait_until(lock, deadline(), [this] { return stop_; })) return;
      if (std::chrono::steady_clock::now() >= deadline()) {  // not moved by Heard meanwhile
        fired_ = true;
        context_->TryCancel();
        return;
      }
    }
  }

  grpc::ClientContext* context_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
  double limit_;
  bool stop_ = false;
  std::atomic<bool> fired_{false};
  std::thread thread_;  // last: starts once the members above exist
};

std::string Seconds(double s) {
  std::ostringstream os;
  os << s;
  return os.str();
}

bool Finished(v1::TrialState s) {
  return s == v1::SUCCEEDED || s == v1::FAILED || s == v1::DIVERGED || s == v1::CANCELED ||
         s == v1::STOPPED;
}

// "queued 3 · running 2 · succeeded 7 · failed 1": the non-zero counts, in lifecycle order.
std::string CountsText(const v1::SweepInfo& s) {
  std::string out;
  for (const char* state :
       {"running", "queued", "succeeded", "stopped", "diverged", "failed", "canceled"}) {
    const int n = StateCount(s, state);
    if (n == 0) continue;
    out += (out.empty() ? "" : " · ") + std::to_string(n) + " " + state;
  }
  return out.empty() ? "no trials" : out;
}

// `reason`: whether to spell out the waiting reason (the terminal frame gives it its own line).
std::string EtaText(const v1::SweepInfo& s, std::optional<double> eta_s, bool reason = true) {
  if (s.finished()) return "done";
  if (!s.waiting_reason().empty()) return reason ? "waiting: " + s.waiting_reason() : "waiting";
  return "ETA " + (eta_s ? FormatDuration(*eta_s) : std::string("-"));
}

// "attention.kind" -> "kind": the last part of an axis name, to keep the watch view narrow.
std::string ShortAxis(const std::string& axis) {
  const size_t dot = axis.rfind('.');
  return dot == std::string::npos ? axis : axis.substr(dot + 1);
}

std::string Clock(double unix_s) {
  const time_t t = static_cast<time_t>(unix_s);
  tm local;
  localtime_r(&t, &local);
  char buf[16];
  std::strftime(buf, sizeof buf, "%H:%M:%S", &local);
  return buf;
}

WatchOutcome OutcomeOf(const v1::SweepInfo& s) {
  WatchOutcome o;
  o.succeeded = StateCount(s, "succeeded");
  o.failed = StateCount(s, "failed");
  o.diverged = StateCount(s, "diverged");
  o.canceled = StateCount(s, "canceled");
  o.stopped = StateCount(s, "stopped");
  return o;
}

void PrintSummary(const v1::SweepSnapshot& snap, const Io& io) {
  const v1::SweepInfo& s = snap.sweep();
  const WatchOutcome o = OutcomeOf(s);
  *io.out << "sweep " << s.name() << " finished: " << o.succeeded << " succeeded, " << o.diverged
          << " diverged, " << o.failed << " failed, " << o.canceled << " canceled"
          << (o.stopped > 0 ? ", " + std::to_string(o.stopped) + " stopped early" : std::string())
          << "\n";
  int listed = 0, unlisted = 0;
  for (const v1::TrialSummary& t : snap.trials()) {
    if (t.state() != v1::FAILED && t.state() != v1::CANCELED) continue;
    if (listed == kMaxListedFailures) {
      ++unlisted;
      continue;
    }
    ++listed;
    const std::string reason = t.reason().substr(0, t.reason().find('\n'));
    *io.out << "  trial " << t.trial_id() << " " << TrialStateName(t.state())
            << (t.attempt() > 0 ? " (attempt " + std::to_string(t.attempt()) + ")" : "")
            << (reason.empty() ? "" : ": " + reason) << "\n";
  }
  if (unlisted > 0) {
    *io.out << "  … and " << unlisted << " more; see: ablate status " << s.name() << "\n";
  }
}

}  // namespace

SweepProgress ComputeProgress(const v1::SweepSnapshot& snap) {
  SweepProgress p;
  p.total_trials = snap.trials_size();
  bool steps_known = snap.trials_size() > 0;
  double done_steps = 0, total_steps = 0;
  for (const v1::TrialSummary& t : snap.trials()) {
    if (Finished(t.state())) ++p.finished_trials;
    if (t.total_steps() <= 0) {
      steps_known = false;
      continue;
    }
    total_steps += t.total_steps();
    // A finished trial's work is done whatever step it stopped at (diverged, failed, canceled).
    done_steps +=
        Finished(t.state()) ? t.total_steps() : std::clamp<double>(t.step(), 0, t.total_steps());
  }
  if (snap.trials().empty() && snap.sweep().total() > 0) {
    // A snapshot without the trial list: count trials from the sweep's state counts.
    p.total_trials = snap.sweep().total();
    p.finished_trials = FinishedCount(snap.sweep());
  }
  p.in_steps = steps_known;
  p.done = steps_known ? done_steps : p.finished_trials;
  p.total = steps_known ? total_steps : p.total_trials;
  return p;
}

std::vector<std::string> WatchFrame(const v1::SweepSnapshot& snap, std::optional<double> eta_s,
                                    int width, int max_trial_lines, bool unicode) {
  const v1::SweepInfo& s = snap.sweep();
  const SweepProgress p = ComputeProgress(snap);
  std::vector<std::string> lines;
  lines.push_back("sweep " + s.name() + " (id " + std::to_string(s.sweep_id()) + ")  " +
                  ProgressBar(p.fraction(), kOverallBar, unicode) + " " +
                  FormatPercent(p.fraction()) + "  " + EtaText(s, eta_s, /*reason=*/false));
  lines.push_back("  " + std::to_string(p.finished_trials) + "/" + std::to_string(p.total_trials) +
                  " trials finished · " + CountsText(s));
  if (!s.finished() && !s.waiting_reason().empty()) {
    lines.push_back("  waiting: " + s.waiting_reason());
  }
  std::vector<const v1::TrialSummary*> running;
  for (const v1::TrialSummary& t : snap.trials()) {
    if (t.state() == v1::RUNNING) running.push_back(&t);
  }
  std::sort(running.begin(), running.end(),
            [](auto* a, auto* b) { return a->trial_id() < b->trial_id(); });
  const size_t shown = std::min<size_t>(running.size(), std::max(0, max_trial_lines));
  if (shown > 0) {
    // The running trials as an aligned table under a header, indented under the sweep's lines.
    Table t;
    t.AddColumn("trial");
    t.AddColumn("progress");
    t.AddColumn("step").align = Column::Align::kRight;
    t.AddColumn("loss");
    t.AddColumn("val_loss");
    t.AddColumn("worker");
    for (const std::string& axis : s.axes()) t.AddColumn(ShortAxis(axis));
    for (size_t i = 0; i < shown; ++i) {
      const v1::TrialSummary& tr = *running[i];
      const double frac = tr.total_steps() > 0 ? double(tr.step()) / tr.total_steps() : 0;
      std::vector<Cell> row{
          Cell::Int(tr.trial_id()),
          Cell::Text(ProgressBar(frac, kTrialBar, unicode)),
          Cell::Text(std::to_string(tr.step()) + "/" + std::to_string(tr.total_steps())),
          LossCell(tr.loss()),
          LossCell(tr.val_loss()),
          tr.worker_id().empty() ? Cell() : Cell::Text(tr.worker_id())};
      for (const std::string& axis : s.axes()) {
        auto it = tr.axes().find(axis);
        row.push_back(it == tr.axes().end() ? Cell() : Cell::Text(it->second));
      }
      t.AddRow(std::move(row));
    }
    std::istringstream table(RenderText(t));
    for (std::string line; std::getline(table, line);) lines.push_back("  " + line);
  }
  if (running.size() > shown) {
    lines.push_back("  … and " + std::to_string(running.size() - shown) + " more running");
  }
  // One column short of the width: writing the last column makes some terminals wrap.
  const size_t cut = static_cast<size_t>(std::max(width - 1, 20));
  for (std::string& l : lines) l = Truncate(l, cut);
  return lines;
}

std::string WatchLine(const v1::SweepSnapshot& snap, std::optional<double> eta_s) {
  const v1::SweepInfo& s = snap.sweep();
  const SweepProgress p = ComputeProgress(snap);
  return "sweep " + s.name() + ": " + FormatPercent(p.fraction()) + " · " +
         std::to_string(p.finished_trials) + "/" + std::to_string(p.total_trials) + " finished · " +
         CountsText(s) + " · " + EtaText(s, eta_s);
}

std::string Redrawer::Draw(const std::vector<std::string>& lines) {
  std::string out;
  // Back to the first line of the previous frame, then overwrite line by line; "\x1b[J" clears
  // what a longer previous frame left below.
  if (lines_ > 0) out += "\x1b[" + std::to_string(lines_) + "A\r";
  for (const std::string& l : lines) out += "\x1b[2K" + l + "\n";
  out += "\x1b[J";
  lines_ = static_cast<int>(lines.size());
  return out;
}

StatusOr<WatchOutcome> Watch(Client& client, const WatchOptions& options, const Io& io) {
  ABLATE_ASSIGN_OR_RETURN(std::string sweep, ParseSweepRef(options.sweep));
  if (!(options.interval_s > 0)) return InvalidArgument("--interval: must be positive");
  v1::WatchRequest req;
  req.set_sweep(sweep);
  req.set_interval_ms(static_cast<int32_t>(std::clamp(options.interval_s * 1000, 50.0, 3.6e6)));

  EtaEstimator eta;
  bool eta_in_steps = false;
  Redrawer redraw;
  std::string last_key;  // the off-terminal line without time and ETA: print when it changes
  bool got_any = false;
  double lost_since = -1;  // when the stream broke (reconnecting until --timeout); -1: not lost
  double backoff_s = 0.25;
  int first_contact_failures = 0;

  // The longest silence accepted: the first snapshot comes at once (--timeout for it), later ones
  // at least every five intervals.
  const double timeout_s = client.options().timeout_s;
  const double between_s = 5 * req.interval_ms() / 1000.0 + timeout_s;
  for (;;) {
    auto context = client.NewContext(/*unary=*/false);
    std::unique_ptr<grpc::ClientReaderInterface<v1::SweepSnapshot>> reader =
        client.stub().Watch(context.get(), req);
    auto watchdog =
        std::make_unique<SilenceWatchdog>(context.get(), got_any ? between_s : timeout_s);
    v1::SweepSnapshot snap;
    bool finished = false;
    while (reader->Read(&snap)) {
      watchdog->Heard(between_s);
      got_any = true;
      lost_since = -1;
      backoff_s = 0.25;
      const double now = io.now();
      const SweepProgress p = ComputeProgress(snap);
      if (p.in_steps != eta_in_steps) {
        eta = EtaEstimator();
        eta_in_steps = p.in_steps;
      }
      eta.Add(now, p.done, p.total);
      const std::optional<double> left = eta.SecondsLeft();
      finished = snap.sweep().finished();
      if (io.tty) {
        *io.out << redraw.Draw(WatchFrame(snap, left, io.width, std::max(3, io.height - 5), true));
        io.out->flush();
      } else {
        const std::string key = WatchLine(snap, std::nullopt);
        if (key != last_key || finished) {
          last_key = key;
          *io.out << "[" << Clock(now) << "] " << WatchLine(snap, left) << "\n";
          io.out->flush();
        }
      }
      if (finished) break;
    }
    const bool silent = watchdog->fired();
    const double silence_s = watchdog->limit_s();
    watchdog.reset();
    if (finished) {
      context->TryCancel();  // the server ends the stream anyway; do not wait for it
      reader->Finish();
      PrintSummary(snap, io);
      return OutcomeOf(snap.sweep());
    }
    Status st = client.FromGrpc(reader->Finish());
    if (silent && !got_any) {
      // Connected, but no first snapshot within --timeout: a frozen coordinator is not one that
      // is still starting, so it is reported at once.
      return Status(StatusCode::kDeadlineExceeded,
                    "the coordinator at " + client.options().coordinator +
                        " accepted the connection but sent nothing within " + Seconds(timeout_s) +
                        " s (--timeout); ablated may be frozen");
    }
    if (silent) {
      st = Status(StatusCode::kUnavailable, "the coordinator at " + client.options().coordinator +
                                                " sent nothing for " + Seconds(silence_s) + " s");
    } else if (st.ok()) {
      // The server closed the stream before the sweep finished (it is shutting down).
      st = Status(StatusCode::kUnavailable, "the coordinator at " + client.options().coordinator +
                                                " ended the watch before the sweep finished");
    }
    const bool unreachable =
        st.code() == StatusCode::kUnavailable || st.code() == StatusCode::kDeadlineExceeded;
    if (!unreachable) return st;  // no such sweep, bad token, ...: the answer
    if (!got_any) {
      // Before any snapshot, an unreachable coordinator is tried a few times over ~2 s (a first
      // connection can fail transiently on a loaded host), then reported; after one, a lost
      // connection is a restart to ride out for up to --timeout.
      if (++first_contact_failures >= kFirstContactAttempts) return st;
    } else {
      const double now = io.now();
      if (lost_since < 0) {
        lost_since = now;
        *io.err << "lost the connection to " << client.options().coordinator
                << "; reconnecting for up to " << FormatDuration(client.options().timeout_s)
                << "\n";
        redraw.Forget();
      }
      if (now - lost_since > client.options().timeout_s) return st;
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(backoff_s));
    backoff_s = std::min(backoff_s * 2, 5.0);
  }
}

void AddWatchCommand(CLI::App& app, Action* selected) {
  auto opts = std::make_shared<WatchOptions>();
  CLI::App* sub = app.add_subcommand("watch", "Follow a sweep's progress until it finishes");
  sub->add_option("sweep", opts->sweep, "Sweep name or sweep:ID")->required();
  sub->add_option("--interval", opts->interval_s, "Seconds between snapshots when nothing changes")
      ->default_str("1");
  sub->callback([opts, selected] {
    *selected = [opts](CommandEnv& env) -> Status {
      ABLATE_RETURN_IF_ERROR(ParseSweepRef(opts->sweep).status());  // before any connection
      ABLATE_ASSIGN_OR_RETURN(Client * client, env.client());
      ABLATE_ASSIGN_OR_RETURN(WatchOutcome outcome, Watch(*client, *opts, env.io));
      if (!outcome.all_ok()) env.exit_code = kExitWatchFailures;
      return Status::Ok();
    };
  });
}

}  // namespace ablate::cli
