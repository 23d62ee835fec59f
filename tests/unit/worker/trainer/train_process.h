// ablate-train as a child process, for the tests of its command line (ABLATE_TRAIN_BIN: the
// binary under test): start it with its output in files, wait for it, read its JSON lines.
#pragma once

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<nlohmann::json> Lines(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::istringstream in(ReadAll(path));
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  }
  return out;
}

// Starts ablate-train with stdout to `stdout_path` (and stderr to `stderr_path` if given, under
// an address-space limit of `max_bytes` if given); returns the pid.
pid_t Start(const std::vector<std::string>& args, const std::string& stdout_path,
            const std::string& stderr_path = "", rlim_t max_bytes = 0) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    if (!stderr_path.empty()) {
      ::dup2(::open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644), 2);
    }
    if (max_bytes > 0) {
      const rlimit lim{max_bytes, max_bytes};
      ::setrlimit(RLIMIT_AS, &lim);
    }
    std::vector<char*> argv;
    static std::string bin = ABLATE_TRAIN_BIN;
    argv.push_back(bin.data());
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(bin.c_str(), argv.data());
    ::_exit(127);
  }
  return pid;
}

int Wait(pid_t pid) {
  int ws = 0;
  ::waitpid(pid, &ws, 0);
  return WIFEXITED(ws) ? WEXITSTATUS(ws) : -WTERMSIG(ws);
}

}  // namespace
