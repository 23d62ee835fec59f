// Process spawning behind an interface (so tests inject a fake).
//
// The real spawner starts a child in its own session and process group (setsid), with stdin from
// /dev/null, stdout on a pipe that the parent reads, stderr appended to a file, a working folder
// and extra environment variables. Signals go to the whole process group, so a trainer's own
// children (data loaders, NCCL helpers) die with it.
//
// Errors: a program that cannot be executed (missing, not executable, bad interpreter) is reported
// by Spawn() with the exec errno ("exec /x/ablate-train: No such file or directory").
// Thread safety: Spawner::Spawn may be called from several threads. A ChildProcess is used by one
// thread at a time; the caller serializes TryWait() and SignalGroup().
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ablate/status.h"

namespace ablate::agent {

struct SpawnSpec {
  std::string program;                                   // path of the executable (no PATH search)
  std::vector<std::string> args;                         // argv[1..]; argv[0] is `program`
  std::vector<std::pair<std::string, std::string>> env;  // set on top of the parent's environment
  std::string cwd;                                       // "" = the parent's
  std::string stderr_path;  // appended to (created 0644); "" = /dev/null
};

struct ExitStatus {
  bool signaled = false;
  int code = 0;    // exit code when !signaled
  int signal = 0;  // terminating signal when signaled
};

class ChildProcess {
 public:
  enum class ReadResult { kData, kTimeout, kEof };
  virtual ~ChildProcess() = default;
  virtual int pid() const = 0;
  // Appends what the child wrote to stdout, waiting at most timeout_ms for something.
  virtual ReadResult ReadStdout(std::string* out, int timeout_ms) = 0;
  // If the child exited: kills what is left of its process group (SIGKILL), reaps the child and
  // returns its status (again on later calls). Never blocks otherwise.
  virtual std::optional<ExitStatus> TryWait() = 0;
  // Sends `sig` to the child's process group until the child is reaped; a no-op after. Errors (the
  // group is gone) are ignored.
  virtual void SignalGroup(int sig) = 0;
};

class ProcessSpawner {
 public:
  virtual ~ProcessSpawner() = default;
  virtual StatusOr<std::unique_ptr<ChildProcess>> Spawn(const SpawnSpec& spec) = 0;
};

// fork/exec with setsid. Never null; not owned.
ProcessSpawner* RealSpawner();

}  // namespace ablate::agent
