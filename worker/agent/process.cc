#include "agent/process.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <mutex>

extern char** environ;

namespace ablate::agent {
namespace {

class RealChild : public ChildProcess {
 public:
  RealChild(pid_t pid, int stdout_fd) : pid_(pid), fd_(stdout_fd) {}
  ~RealChild() override {
    if (fd_ >= 0) ::close(fd_);
    // A child that was never reaped stays a zombie until the worker exits; reap it if it is done.
    TryWait();
  }

  int pid() const override { return pid_; }

  ReadResult ReadStdout(std::string* out, int timeout_ms) override {
    if (fd_ < 0) return ReadResult::kEof;
    pollfd p{fd_, POLLIN, 0};
    const int rc = ::poll(&p, 1, timeout_ms);
    if (rc == 0 || (rc < 0 && errno == EINTR)) return ReadResult::kTimeout;
    char buf[65536];
    const ssize_t n = ::read(fd_, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return ReadResult::kTimeout;
    if (n <= 0) {
      ::close(fd_);
      fd_ = -1;
      return ReadResult::kEof;
    }
    out->append(buf, size_t(n));
    return ReadResult::kData;
  }

  std::optional<ExitStatus> TryWait() override {
    if (status_) return status_;
    // Peek first (WNOWAIT): while the child is an unreaped zombie its pid, and so the group id,
    // cannot be reused, so killing the rest of the group here cannot hit another process.
    siginfo_t info{};
    int r;
    do {
      r = ::waitid(P_PID, id_t(pid_), &info, WEXITED | WNOHANG | WNOWAIT);
    } while (r < 0 && errno == EINTR);
    if (r != 0 || info.si_pid != pid_) return std::nullopt;
    ::kill(-pid_, SIGKILL);  // grandchildren holding the pipe, a GPU or a port
    int ws = 0;
    while (::waitpid(pid_, &ws, 0) < 0 && errno == EINTR) {
    }
    ExitStatus s;
    if (WIFSIGNALED(ws)) {
      s.signaled = true;
      s.signal = WTERMSIG(ws);
    } else {
      s.code = WEXITSTATUS(ws);
    }
    status_ = s;
    return status_;
  }

  // The process group id equals the child's pid (setsid). After the reap the id may belong to a
  // new process, so signals stop there (TryWait already killed the rest of the group).
  void SignalGroup(int sig) override {
    if (!status_) ::kill(-pid_, sig);
  }

 private:
  const pid_t pid_;
  int fd_;
  std::optional<ExitStatus> status_;
};

class ForkSpawner : public ProcessSpawner {
 public:
  StatusOr<std::unique_ptr<ChildProcess>> Spawn(const SpawnSpec& spec) override {
    // Everything the child needs is prepared before fork: after fork in a multithreaded process
    // only async-signal-safe calls are allowed.
    std::vector<std::string> argv_s;
    argv_s.push_back(spec.program);
    for (const auto& a : spec.args) argv_s.push_back(a);
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);

    std::vector<std::string> env_s;
    for (char** e = environ; *e; ++e) {
      std::string kv(*e);
      const std::string key = kv.substr(0, kv.find('='));
      bool overridden = false;
      for (const auto& [k, v] : spec.env) overridden |= (k == key);
      if (!overridden) env_s.push_back(std::move(kv));
    }
    for (const auto& [k, v] : spec.env) env_s.push_back(k + "=" + v);
    std::vector<char*> envp;
    for (auto& e : env_s) envp.push_back(e.data());
    envp.push_back(nullptr);

    int out_pipe[2];
    if (::pipe2(out_pipe, O_CLOEXEC) != 0) return ErrnoToStatus(errno, "pipe");
    int err_pipe[2];  // exec failures travel back on a close-on-exec pipe
    if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
      const int err = errno;
      ::close(out_pipe[0]);
      ::close(out_pipe[1]);
      return ErrnoToStatus(err, "pipe");
    }
    const std::string stderr_path = spec.stderr_path.empty() ? "/dev/null" : spec.stderr_path;
    const int err_fd = ::open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (err_fd < 0) {
      const int err = errno;
      for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) ::close(fd);
      return ErrnoToStatus(err, "open " + stderr_path);
    }

    const pid_t pid = ::fork();
    if (pid < 0) {
      const int err = errno;
      for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1], err_fd}) ::close(fd);
      return ErrnoToStatus(err, "fork");
    }
    if (pid == 0) {
      // Child: async-signal-safe calls only.
      auto fail = [&](int stage) {
        int payload[2] = {stage, errno};
        (void)!::write(err_pipe[1], payload, sizeof payload);
        ::_exit(127);
      };
      ::setsid();
      // The worker blocks SIGINT/SIGTERM in its threads (a signal thread waits for them); a child
      // must start with a clean mask and default handlers.
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      for (int s : {SIGINT, SIGTERM, SIGPIPE, SIGHUP, SIGQUIT}) ::signal(s, SIG_DFL);
      const int devnull = ::open("/dev/null", O_RDONLY);
      if (devnull < 0 || ::dup2(devnull, 0) < 0) fail(1);
      if (::dup2(out_pipe[1], 1) < 0) fail(1);
      if (::dup2(err_fd, 2) < 0) fail(1);
      if (!spec.cwd.empty() && ::chdir(spec.cwd.c_str()) != 0) fail(2);
      ::execve(argv[0], argv.data(), envp.data());
      fail(3);
    }
    ::close(out_pipe[1]);
    ::close(err_pipe[1]);
    ::close(err_fd);
    int payload[2] = {0, 0};
    ssize_t n;
    do {
      n = ::read(err_pipe[0], payload, sizeof payload);
    } while (n < 0 && errno == EINTR);
    ::close(err_pipe[0]);
    if (n == ssize_t(sizeof payload)) {
      ::close(out_pipe[0]);
      int ws;
      while (::waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
      }
      if (payload[0] == 1) return ErrnoToStatus(payload[1], "set up stdio for " + spec.program);
      if (payload[0] == 2) return ErrnoToStatus(payload[1], "chdir " + spec.cwd);
      return ErrnoToStatus(payload[1], "exec " + spec.program);
    }
    return std::unique_ptr<ChildProcess>(new RealChild(pid, out_pipe[0]));
  }
};

}  // namespace

ProcessSpawner* RealSpawner() {
  static ForkSpawner* s = new ForkSpawner();
  return s;
}

}  // namespace ablate::agent
