#include "agent/mps.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "ablate/files.h"

namespace ablate::agent {

namespace {

// The control daemon's "control" named pipe.
bool IsPipeOrSocket(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode));
}

}  // namespace

MpsControl::MpsControl(MpsOptions options) : opt_(std::move(options)) {
  pipe_dir_ = opt_.work_dir + "/mps/pipe";
  log_dir_ = opt_.work_dir + "/mps/log";
}

StatusOr<std::unique_ptr<MpsControl>> MpsControl::Create(MpsOptions options) {
  const std::string mode = options.mode;
  if (!ValidMode(mode)) {
    return InvalidArgument("--mps: '" + mode + "': expected auto, own, host or off");
  }
  std::unique_ptr<MpsControl> m(new MpsControl(std::move(options)));
  if (mode == "off") return m;
  if (mode == "auto" || mode == "host") {
    const char* env = std::getenv("CUDA_MPS_PIPE_DIRECTORY");
    const std::string dir = env && *env ? env : "/tmp/nvidia-mps";
    if (IsPipeOrSocket(dir + "/control")) m->host_pipe_ = dir;
    if (mode == "host" && m->host_pipe_.empty()) {
      return FailedPrecondition("--mps host: no MPS control daemon on this host (no control pipe in " +
                                dir + "); start one, or use --mps auto");
    }
    if (!m->host_pipe_.empty()) return m;
  }
  // Our own daemon: one left by a previous worker process on this work dir is re-adopted if it
  // still answers, else its folders are cleaned.
  std::lock_guard<std::mutex> l(m->mu_);
  if (IsPipeOrSocket(m->pipe_dir_ + "/control")) {
    if (m->RunControl("", "get_server_list\n", true, 5000) == 0) {
      m->own_running_ = true;
      m->adopted_ = true;
      if (m->opt_.log) m->opt_.log("MPS: re-adopted the control daemon at " + m->pipe_dir_);
    } else {
      std::error_code ec;
      std::filesystem::remove_all(m->pipe_dir_, ec);
      if (m->opt_.log) m->opt_.log("MPS: removed the stale pipe folder " + m->pipe_dir_);
    }
  }
  return m;
}

int MpsControl::RunControl(const std::string& arg, const std::string& input, bool own_env,
                           int timeout_ms) {
  // Everything the child needs is built before fork (a child of a threaded process may only
  // call async-signal-safe functions).
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    if (own_env && (std::strncmp(*e, "CUDA_MPS_PIPE_DIRECTORY=", 24) == 0 ||
                    std::strncmp(*e, "CUDA_MPS_LOG_DIRECTORY=", 23) == 0)) {
      continue;
    }
    env_strings.emplace_back(*e);
  }
  if (own_env) {
    env_strings.push_back("CUDA_MPS_PIPE_DIRECTORY=" + pipe_dir_);
    env_strings.push_back("CUDA_MPS_LOG_DIRECTORY=" + log_dir_);
  }
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  // Fixed arguments only: nothing of a trial's config reaches this command line.
  std::string prog = opt_.control, a = arg;
  std::vector<char*> argv = {prog.data()};
  if (!a.empty()) argv.push_back(a.data());
  argv.push_back(nullptr);
  int in[2];
  if (::pipe(in) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(in[0]);
    ::close(in[1]);
    return -1;
  }
  if (pid == 0) {
    ::dup2(in[0], 0);
    ::close(in[0]);
    ::close(in[1]);
    const int null = ::open("/dev/null", O_WRONLY);
    if (null >= 0) {
      ::dup2(null, 1);
      ::dup2(null, 2);
    }
    ::execvpe(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  ::close(in[0]);
  if (!input.empty()) {
    (void)!::write(in[1], input.data(), input.size());
  }
  ::close(in[1]);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    int status = 0;
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (r < 0) return -1;
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

Status MpsControl::StartOwnLocked() {
  ABLATE_RETURN_IF_ERROR(MakeDirs(pipe_dir_));
  ABLATE_RETURN_IF_ERROR(MakeDirs(log_dir_));
  const int rc = RunControl("-d", "", true, opt_.start_timeout_ms);
  if (rc != 0) {
    return FailedPrecondition("MPS: '" + opt_.control + " -d' " +
                              (rc == 127 ? std::string("could not be run (not on PATH?)")
                                         : "failed (exit code " + std::to_string(rc) + ")") +
                              "; see " + log_dir_);
  }
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(opt_.start_timeout_ms);
  while (!IsPipeOrSocket(pipe_dir_ + "/control")) {
    if (std::chrono::steady_clock::now() > deadline) {
      return FailedPrecondition("MPS: the control daemon made no control pipe in " + pipe_dir_ +
                                " within " + std::to_string(opt_.start_timeout_ms) + " ms");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  own_running_ = true;
  if (opt_.log) opt_.log("MPS: started a control daemon at " + pipe_dir_);
  return Status::Ok();
}

StatusOr<MpsControl::Env> MpsControl::ClientEnv() {
  std::lock_guard<std::mutex> l(mu_);
  if (opt_.mode == "off") return Env{};
  if (!host_pipe_.empty()) return Env{{"CUDA_MPS_PIPE_DIRECTORY", host_pipe_}};
  if (unavailable_) return Env{};
  if (!own_running_) {
    Status st = StartOwnLocked();
    if (!st.ok()) {
      if (opt_.mode == "own") return st;
      unavailable_ = true;  // auto: share without MPS from now on, said once
      if (opt_.log) opt_.log(st.message() + "; shared GPUs run without MPS");
      return Env{};
    }
  }
  return Env{{"CUDA_MPS_PIPE_DIRECTORY", pipe_dir_}, {"CUDA_MPS_LOG_DIRECTORY", log_dir_}};
}

void MpsControl::Shutdown() {
  std::lock_guard<std::mutex> l(mu_);
  if (!own_running_) return;
  const int rc = RunControl("", "quit\n", true, 10000);
  own_running_ = false;
  if (opt_.log) {
    opt_.log(rc == 0 ? "MPS: stopped the control daemon at " + pipe_dir_
                     : "MPS: 'quit' to the control daemon at " + pipe_dir_ + " failed (exit code " +
                           std::to_string(rc) + ")");
  }
}

std::string MpsControl::Describe() const {
  std::lock_guard<std::mutex> l(mu_);
  if (opt_.mode == "off") return "off";
  if (!host_pipe_.empty()) return "the host's daemon at " + host_pipe_;
  if (own_running_) return "own daemon at " + pipe_dir_ + (adopted_ ? " (re-adopted)" : "");
  if (unavailable_) return "unavailable (shared GPUs time-slice)";
  return opt_.mode + ": own daemon at " + pipe_dir_ + " when a shared trial starts";
}

bool MpsControl::own_running() const {
  std::lock_guard<std::mutex> l(mu_);
  return own_running_;
}

}  // namespace ablate::agent
