// Start-up decisions of ablate-worker that do not need a coordinator: the persistent worker id,
// where the trainer binary is, and the command line itself (WorkerMain, called by main.cc).
// Thread safety: call from one thread at start-up.
#pragma once

#include <string>

#include "ablate/status.h"

namespace ablate::agent {

// The id in <work_dir>/worker_id; when the file is missing, "<hostname>-<6 hex digits>" is
// generated and written there (atomically), so restarts keep the id. InvalidArgument when the file
// holds something that is not an id (empty, whitespace inside, longer than 200 characters).
StatusOr<std::string> LoadOrCreateWorkerId(const std::string& work_dir,
                                           const std::string& hostname);

// The trainer executable: `flag` when given (it must be an executable file), else `ablate-train`
// next to `self_exe` (both are in build/bin/ and in a bundle's bin/), else the first one on
// `path_env` (a PATH-style list). NotFound with every place tried.
StatusOr<std::string> FindTrainer(const std::string& flag, const std::string& self_exe,
                                  const std::string& path_env);

// ablate-worker's main: parses flags, prepares the work dir, runs the agent until it is drained.
// Exit codes: 0 drained/stopped; 2 a bad command line (bad --gpus, missing token file, ...);
// 1 any other error.
int WorkerMain(int argc, char** argv);

}  // namespace ablate::agent
