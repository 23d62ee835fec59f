// Static files of the web dashboard, served from --web-dir with path-traversal protection.
#pragma once

#include <string>

#include "ablate/status.h"

namespace ablate::server::http {

// Maps a URL path (already percent-decoded once by the HTTP layer) to a regular file under `root`.
// "/" and directories map to their index.html. Refuses (PermissionDenied -> 403) a path with a NUL,
// a backslash, a '%' (a second round of encoding such as %252e%252e), or a "." / ".." segment, and
// any file whose canonical path (symlinks resolved) lies outside the canonical root; NotFound (404)
// when nothing is there or it is not a regular file. Absolute-looking paths ("//etc/passwd") are
// taken relative to the root. Returns the canonical file path.
StatusOr<std::string> ResolveStaticPath(const std::string& root, const std::string& url_path);

// Content-Type by file extension (text/html, application/javascript, text/css, ...).
std::string ContentTypeFor(const std::string& path);

// The default --web-dir: the first existing of <exe dir>/web, <exe dir>/../share/ablate/web,
// <exe dir>/../web, and `source_web_dir` (the source tree's web/); "" when none exists.
std::string DefaultWebDir(const std::string& source_web_dir);

}  // namespace ablate::server::http
