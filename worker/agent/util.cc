#include "agent/util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <vector>

namespace ablate::agent {

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
