// CUDA MPS for the trials that share a GPU (resources.gpus: 1/k): under MPS their kernels run side
// by side instead of time-slicing between contexts (docs/design.md, "GPU sharing").
//
// --mps picks the mode:
//   auto (default): join an MPS control daemon the host already runs (a control pipe in
//         $CUDA_MPS_PIPE_DIRECTORY, else /tmp/nvidia-mps: Kubernetes' device plugin, a systemd unit);
//         else start our own when the first shared trial starts, if nvidia-cuda-mps-control is on
//         PATH; else share without MPS.
//   own:  always our own daemon (an error at the first shared trial when it cannot be started).
//   host: the host's daemon only (an error at start-up when there is none).
//   off:  never MPS; shared trials time-slice.
// Our own daemon keeps its pipe and log folders in <work_dir>/mps/{pipe,log}, so it never touches
// the host's default one, and only the shared trials' trainers are pointed at it
// (CUDA_MPS_PIPE_DIRECTORY, CUDA_MPS_LOG_DIRECTORY); whole-GPU trials run without it. A worker
// restarted after a kill finds the daemon it left: alive (it answers get_server_list), it is
// re-adopted; dead, its folders are cleaned and a new one is started when needed. Shutdown()
// quits our own daemon (`quit` on its control pipe); a joined host daemon is left alone.
//
// Thread safety: all methods take an internal lock.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "ablate/status.h"

namespace ablate::agent {

struct MpsOptions {
  std::string mode = "auto";  // auto | own | host | off
  std::string work_dir;        // absolute
  // The control program: a name looked up on PATH, or a path (tests point it at a stand-in).
  std::string control = "nvidia-cuda-mps-control";
  int start_timeout_ms = 10000;  // for the daemon's control pipe to appear
  std::function<void(const std::string&)> log;
};

class MpsControl {
 public:
  using Env = std::vector<std::pair<std::string, std::string>>;

  static bool ValidMode(const std::string& mode) {
    return mode == "auto" || mode == "own" || mode == "host" || mode == "off";
  }
  // InvalidArgument for an unknown mode; FailedPrecondition for host without a host daemon.
  static StatusOr<std::unique_ptr<MpsControl>> Create(MpsOptions options);
  ~MpsControl() = default;

  // The environment a shared trial's trainer gets: {} when it runs without MPS (mode off, or
  // auto with no way to run it), the host daemon's pipe folder when joined, our own daemon's
  // folders (starting it first if need be). Errors: mode own and the daemon cannot be started.
  StatusOr<Env> ClientEnv();

  // Quits our own daemon if one runs; nothing for a joined or no daemon.
  void Shutdown();

  // "off", "host daemon at /tmp/nvidia-mps", "own daemon at <dir> (re-adopted)", ... for the log.
  std::string Describe() const;
  bool own_running() const;

 private:
  explicit MpsControl(MpsOptions options);
  Status StartOwnLocked();
  // Runs the control program with `input` on stdin and our own pipe folders (or none) in its
  // environment; returns its exit code (or -1 if it could not run / timed out).
  int RunControl(const std::string& arg, const std::string& input, bool own_env, int timeout_ms);

  const MpsOptions opt_;
  mutable std::mutex mu_;
  std::string host_pipe_;   // joined host daemon's pipe folder ("" none)
  std::string pipe_dir_, log_dir_;
  bool own_running_ = false;  // GUARDED_BY(mu_)
  bool adopted_ = false;      // GUARDED_BY(mu_)
  bool unavailable_ = false;  // GUARDED_BY(mu_): auto, and the daemon cannot be run
};

}  // namespace ablate::agent
