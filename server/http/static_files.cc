#include "http/static_files.h"

#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sstream>

namespace ablate::server::http {
namespace {

bool IsDir(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

StatusOr<std::string> Canonical(const std::string& p) {
  char buf[PATH_MAX];
  if (!::realpath(p.c_str(), buf)) return NotFound("not found");
  return std::string(buf);
}

}  // namespace

StatusOr<std::string> ResolveStaticPath(const std::string& root, const std::string& url_path) {
  const Status forbidden(StatusCode::kPermissionDenied, "forbidden path");
  if (url_path.find('\0') != std::string::npos || url_path.find('\\') != std::string::npos ||
      url_path.find('%') != std::string::npos) {
    return forbidden;
  }
  std::string rel;
  std::stringstream segments(url_path);
  for (std::string seg; std::getline(segments, seg, '/');) {
    if (seg.empty()) continue;  // "//etc" stays under the root
    if (seg == "." || seg == "..") return forbidden;
    rel += "/" + seg;
  }
  auto canon_root = Canonical(root);
  if (!canon_root.ok()) return NotFound("web dir " + root + " does not exist");
  std::string path = *canon_root + rel;
  if (IsDir(path)) path += "/index.html";
  auto canon = Canonical(path);
  if (!canon.ok()) return NotFound("not found: " + url_path);
  // A symlink inside the root may point anywhere: only the canonical path decides.
  if (canon->compare(0, canon_root->size() + 1, *canon_root + "/") != 0) return forbidden;
  struct stat st {};
  if (::stat(canon->c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return NotFound("not found: " + url_path);
  }
  return *canon;
}

std::string ContentTypeFor(const std::string& path) {
  auto dot = path.rfind('.');
  std::string ext = dot == std::string::npos ? "" : path.substr(dot + 1);
  if (ext == "html" || ext == "htm") return "text/html; charset=utf-8";
  if (ext == "js" || ext == "mjs") return "application/javascript; charset=utf-8";
  if (ext == "css") return "text/css; charset=utf-8";
  if (ext == "json" || ext == "map") return "application/json";
  if (ext == "svg") return "image/svg+xml";
  if (ext == "png") return "image/png";
  if (ext == "ico") return "image/x-icon";
  if (ext == "woff2") return "font/woff2";
  if (ext == "txt") return "text/plain; charset=utf-8";
  return "application/octet-stream";
}

std::string DefaultWebDir(const std::string& source_web_dir) {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n > 0) {
    std::string exe(buf, size_t(n));
    std::string dir = exe.substr(0, exe.rfind('/'));
    for (const std::string& c : {dir + "/web", dir + "/../share/ablate/web", dir + "/../web"}) {
      if (IsDir(c)) return c;
    }
  }
  if (!source_web_dir.empty() && IsDir(source_web_dir)) return source_web_dir;
  return "";
}

}  // namespace ablate::server::http
