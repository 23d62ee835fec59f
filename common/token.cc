#include "ablate/token.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <fstream>
#include <sstream>

#include "ablate/files.h"

namespace ablate {

StatusOr<std::string> GenerateToken() {
  int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, "open /dev/urandom");
  unsigned char buf[32];
  size_t got = 0;
  while (got < sizeof buf) {
    ssize_t n = ::read(fd, buf + got, sizeof buf - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      return Internal("read /dev/urandom failed");
    }
    got += size_t(n);
  }
  ::close(fd);
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned char c : buf) {
    out += hex[c >> 4];
    out += hex[c & 15];
  }
  return out;
}

StatusOr<std::string> ReadToken(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return ErrnoToStatus(errno, "token file " + path);
  if (st.st_mode & (S_IRWXG | S_IRWXO)) {
    return Status(StatusCode::kPermissionDenied,
                  "token file " + path + " is accessible to other users (mode " +
                      [&] {
                        char b[8];
                        std::snprintf(b, sizeof b, "%04o", unsigned(st.st_mode & 07777));
                        return std::string(b);
                      }() +
                      "); run: chmod 600 " + path);
  }
  if (const std::string why = NotATextFile(path); !why.empty()) {
    return InvalidArgument("token file " + path + " is " + why);
  }
  std::ifstream in(path);
  if (!in) return ErrnoToStatus(errno, "read token file " + path);
  std::string token;
  std::getline(in, token);
  // An editor's byte-order mark and surrounding blanks are not part of the token.
  size_t begin = token.rfind("\xEF\xBB\xBF", 0) == 0 ? 3 : 0;
  auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v'; };
  size_t end = token.size();
  while (begin < end && blank(token[begin])) ++begin;
  while (end > begin && blank(token[end - 1])) --end;
  // Anything else outside printable ASCII would make an invalid header value (gRPC aborts on it,
  // printing the value): refuse it here, naming the position, never the token.
  for (size_t i = begin; i < end; ++i) {
    const auto c = static_cast<unsigned char>(token[i]);
    if (c < 0x21 || c > 0x7e) {
      char b[8];
      std::snprintf(b, sizeof b, "0x%02x", unsigned(c));
      return InvalidArgument("token file " + path + ": byte " + b + " at column " +
                             std::to_string(i + 1) +
                             " of its first line is not printable ASCII (a token is one line "
                             "of printable ASCII without blanks)");
    }
  }
  token = token.substr(begin, end - begin);
  if (token.size() < 16) {
    return InvalidArgument("token file " + path + " holds no token (expected one line of at least 16 characters)");
  }
  return token;
}

StatusOr<std::string> LoadOrCreateToken(const std::string& path) {
  if (::access(path.c_str(), F_OK) == 0) return ReadToken(path);
  ABLATE_ASSIGN_OR_RETURN(std::string token, GenerateToken());
  ABLATE_RETURN_IF_ERROR(WriteFileAtomic(path, token + "\n", 0600));
  return token;
}

bool BearerMatches(const std::string& authorization, const std::string& token) {
  constexpr size_t kScheme = 7;  // "Bearer "
  if (token.empty() || authorization.size() <= kScheme || authorization[kScheme - 1] != ' ') {
    return false;
  }
  for (size_t i = 0; i + 1 < kScheme; ++i) {
    if (std::tolower(static_cast<unsigned char>(authorization[i])) != "bearer"[i]) return false;
  }
  return TokenEquals(authorization.substr(kScheme), token);
}

bool TokenEquals(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace ablate
