// Real processes for integration tests: spawn, capture, wait, kill. Test-only helpers.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace ablate::testing {

struct Proc {
  pid_t pid = -1;
  std::string log;  // stdout+stderr file
};

// Starts argv[0] with args, stdout and stderr appended to `log`, in its own process group, with
// extra environment entries ("K=V").
inline Proc Spawn(const std::vector<std::string>& argv, const std::string& log,
                  const std::vector<std::string>& env = {}) {
  Proc p;
  p.log = log;
  p.pid = ::fork();
  if (p.pid == 0) {
    ::setpgid(0, 0);
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    int in = ::open("/dev/null", O_RDONLY);
    ::dup2(in, 0);
    for (const auto& e : env) ::putenv(const_cast<char*>(e.c_str()));
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  return p;
}

// Waits up to `timeout` for the process; returns its exit status (-signal), or 999 on timeout.
inline int Wait(const Proc& p, std::chrono::milliseconds timeout) {
  auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    int st = 0;
    pid_t r = ::waitpid(p.pid, &st, WNOHANG);
    if (r == p.pid) return WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return 999;
}

inline void Kill(const Proc& p, int sig = SIGKILL) {
  if (p.pid > 0) ::kill(-p.pid, sig);
}

struct Output {
  int code = -1;
  std::string out;
};

// Runs a command to completion (up to `timeout`), returning its exit code and stdout+stderr.
inline Output Run(const std::vector<std::string>& argv, const std::string& scratch,
                  const std::vector<std::string>& env = {},
                  std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  static int counter = 0;
  std::string log = scratch + "/run_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + ".log";
  Proc p = Spawn(argv, log, env);
  Output o;
  o.code = Wait(p, timeout);
  if (o.code == 999) Kill(p);
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  o.out = ss.str();
  return o;
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The text of the file at `path` without trailing newlines and blanks, once it has some (a
// daemon's address file), or "" after `timeout`.
inline std::string WaitForFile(const std::string& path, std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    std::string s = ReadFile(path);
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    if (!s.empty() || std::chrono::steady_clock::now() >= end) return s;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace ablate::testing
