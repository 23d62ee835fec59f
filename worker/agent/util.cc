#include "agent/util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <vector>

namespace ablate::agent {

Status MakeDirs(const std::string& path) {
  if (path.empty()) return InvalidArgument("MakeDirs: empty path");
  std::string partial;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    partial = path.substr(0, pos);
    if (partial.empty()) continue;
    if (::mkdir(partial.c_str(), 0755) == 0) {
      // The new folder's entry is durable before anything inside it is (a spool fsynced in a
      // folder whose entry was lost to a power cut would be lost with it).
      ABLATE_RETURN_IF_ERROR(FsyncDir(DirName(partial)));
    } else if (errno != EEXIST) {
      return ErrnoToStatus(errno, "mkdir " + partial);
    }
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return ErrnoToStatus(errno, "stat " + path);
  if (!S_ISDIR(st.st_mode)) return FailedPrecondition(path + " exists and is not a folder");
  return Status::Ok();
}

std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

Status FsyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, "open " + dir);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return ErrnoToStatus(err, "fsync " + dir);
  return Status::Ok();
}

Status WriteFileAtomic(const std::string& path, std::string_view content, int mode) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return ErrnoToStatus(errno, "open " + tmp);
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return ErrnoToStatus(err, "write " + tmp);
    }
    done += size_t(n);
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    return ErrnoToStatus(err, "fsync " + tmp);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return ErrnoToStatus(err, "rename " + tmp + " to " + path);
  }
  return FsyncDir(DirName(path));
}

StatusOr<std::string> ReadFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return NotFound(path + ": no such file");
    return ErrnoToStatus(errno, "open " + path);
  }
  std::string out;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return ErrnoToStatus(err, "read " + path);
    }
    if (n == 0) break;
    out.append(buf, size_t(n));
  }
  ::close(fd);
  return out;
}

std::string ReadLogTail(const std::string& path, size_t max_bytes, size_t max_lines) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return "";
  }
  const size_t size = size_t(st.st_size);
  const size_t start = size > max_bytes ? size - max_bytes : 0;
  std::string data(size - start, '\0');
  size_t got = 0;
  while (got < data.size()) {
    const ssize_t n = ::pread(fd, data.data() + got, data.size() - got, off_t(start + got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += size_t(n);
  }
  ::close(fd);
  data.resize(got);
  size_t begin = 0;
  if (start > 0) {  // the first line was cut by the byte limit: drop it
    const size_t nl = data.find('\n');
    begin = nl == std::string::npos ? 0 : nl + 1;
  }
  // Keep the last max_lines lines; a trailing newline does not start another line.
  size_t end = data.size();
  size_t pos = end;
  size_t lines = 0;
  if (pos > begin && data[pos - 1] == '\n') --pos;
  while (pos > begin) {
    const size_t nl = data.rfind('\n', pos - 1);
    if (nl == std::string::npos || nl < begin) break;
    if (++lines >= max_lines) {
      begin = nl + 1;
      break;
    }
    pos = nl;
  }
  return SanitizeUtf8(std::string_view(data).substr(begin, end - begin));
}

std::string SignalName(int sig) {
  switch (sig) {
    case SIGHUP:
      return "SIGHUP";
    case SIGINT:
      return "SIGINT";
    case SIGQUIT:
      return "SIGQUIT";
    case SIGILL:
      return "SIGILL";
    case SIGTRAP:
      return "SIGTRAP";
    case SIGABRT:
      return "SIGABRT";
    case SIGBUS:
      return "SIGBUS";
    case SIGFPE:
      return "SIGFPE";
    case SIGKILL:
      return "SIGKILL";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGSEGV:
      return "SIGSEGV";
    case SIGUSR2:
      return "SIGUSR2";
    case SIGPIPE:
      return "SIGPIPE";
    case SIGALRM:
      return "SIGALRM";
    case SIGTERM:
      return "SIGTERM";
    case SIGXCPU:
      return "SIGXCPU";
    case SIGXFSZ:
      return "SIGXFSZ";
    case SIGSYS:
      return "SIGSYS";
    default:
      return "SIG" + std::to_string(sig);
  }
}

}  // namespace ablate::agent
