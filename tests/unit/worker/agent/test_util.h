// Helpers shared by the worker agent's tests: temporary folders and the fake trainer script.
#pragma once

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>

#include "temp_dir.h"

namespace ablate::agent::testing {

using TempDir = ::ablate::testing::TempDir;  // tests/temp_dir.h

inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void WriteAll(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << content;
}

// Polls `pred` every 10 ms for up to `timeout_ms`; returns its last value.
inline bool WaitFor(const std::function<bool()>& pred, int timeout_ms) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pred();
}

// True when `pid` is gone or a zombie (a container's pid 1 may never reap orphans).
inline bool ProcessGone(int pid) {
  if (::kill(pid, 0) != 0) return true;
  std::string stat = ReadAll("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');
  return paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 2] == 'Z';
}

// The fake trainer: a POSIX shell script standing in for ablate-train. Its mode is its first
// argument, or, when started as the agent starts ablate-train (--config F --out D), the value of
// "mode" in the config file. Modes:
//   ok        start line, a non-JSON line, steps 1..N ("steps" in the config, default 3; step i
//             reports tokens_per_s = 1000 i) with a sleep of "sleep" seconds between, an eval, a
//             checkpoint, a final line "ok"; exit 0
//   diverged  one step, final line "diverged" with a reason; exit 0
//   exit3     one step, a message on stderr, exit 3
//   nofinal   one step, exit 0
//   sigkill   one step, then kills itself with SIGKILL
//   sleep     starts a grandchild (`sleep 1000`, pid in ./grandchild.pid), one step, waits
//   stubborn  like sleep but ignores SIGTERM (so does the grandchild)
//   orphan    starts a grandchild that keeps stdout open, final line, exit 0
// It always writes its environment's CUDA_VISIBLE_DEVICES and ABLATE_CPU_THREADS to stderr.
inline std::string WriteFakeTrainer(const std::string& dir) {
  const std::string path = dir + "/fake-trainer.sh";
  WriteAll(path, R"SH(#!/bin/sh
mode="$1"
steps=3
pause=0
if [ "$1" = "--config" ]; then
  mode=$(sed -n 's/.*"mode": *"\([a-z0-9]*\)".*/\1/p' "$2")
  s=$(sed -n 's/.*"steps": *\([0-9]*\).*/\1/p' "$2"); [ -n "$s" ] && steps=$s
  p=$(sed -n 's/.*"sleep": *\([0-9.]*\).*/\1/p' "$2"); [ -n "$p" ] && pause=$p
  [ "$5" = "--resume" ] && echo "resuming from $6" >&2
fi
echo "env CUDA_VISIBLE_DEVICES=[${CUDA_VISIBLE_DEVICES-unset}] ABLATE_CPU_THREADS=[${ABLATE_CPU_THREADS-unset}] CUDA_DEVICE_ORDER=[${CUDA_DEVICE_ORDER-unset}]" >&2
echo "args [$*]" >&2
echo '{"type":"start","config_hash":"0123abcd","params":1000,"cpu_threads":'"${ABLATE_CPU_THREADS:-0}"',"backend":"cpu"}'
echo "a stray line that is not JSON"
case "$mode" in
  ok)
    i=1
    while [ $i -le $steps ]; do
      echo '{"type":"step","step":'$i',"loss":'$((100 - i))'.5,"lr":0.01,"tokens_per_s":'$((1000 * i))'}'
      [ "$pause" != "0" ] && sleep $pause
      i=$((i + 1))
    done
    echo '{"type":"eval","step":'$steps',"val_loss":6.25,"val_bpb":9.0}'
    echo '{"type":"checkpoint","step":'$steps',"path":"/ckpt/step_'$steps'.ckpt"}'
    echo '{"type":"final","status":"ok","step":'$steps',"final_train_loss":7.5,"final_val_loss":6.25}'
    exit 0 ;;
  diverged)
    echo '{"type":"step","step":1,"loss":null}'
    echo '{"type":"final","status":"diverged","step":1,"final_train_loss":null,"reason":"train loss nan at step 1 is not finite"}'
    exit 0 ;;
  exit3)
    echo '{"type":"step","step":1,"loss":5}'
    echo "ablate-train: boom: the corpus is missing" >&2
    exit 3 ;;
  nofinal)
    echo '{"type":"step","step":1,"loss":5}'
    exit 0 ;;
  sigkill)
    echo '{"type":"step","step":1,"loss":5}'
    kill -9 $$ ;;
  sleep)
    sleep 1000 &
    echo $! > grandchild.pid
    echo '{"type":"step","step":1,"loss":5}'
    wait ;;
  stubborn)
    trap '' TERM
    sleep 1000 &
    echo $! > grandchild.pid
    echo '{"type":"step","step":1,"loss":5}'
    while true; do sleep 0.2; done ;;
  mps)
    echo "env CUDA_MPS_PIPE_DIRECTORY=[${CUDA_MPS_PIPE_DIRECTORY-unset}]" >&2
    echo '{"type":"step","step":1,"loss":5}'
    echo "ablate-train: step 2: cudaErrorMpsClientTerminated: the MPS client was terminated" >&2
    exit 76 ;;
  usr1)
    trap 'echo "{\"type\":\"checkpoint\",\"step\":1,\"path\":\"/ckpt/step_1.ckpt\"}"; echo "{\"type\":\"final\",\"status\":\"preempted\",\"step\":1,\"reason\":\"preempted: checkpointed at step 1\"}"; exit 75' USR1
    echo '{"type":"step","step":1,"loss":5}'
    while true; do sleep 0.05; done ;;
  orphan)
    sleep 1000 &
    echo $! > grandchild.pid
    echo '{"type":"final","status":"ok","step":0}'
    exit 0 ;;
  *)
    echo "fake trainer: unknown mode '$mode'" >&2
    exit 2 ;;
esac
)SH");
  ::chmod(path.c_str(), 0755);
  return path;
}

}  // namespace ablate::agent::testing
