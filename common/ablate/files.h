// Checks on paths given by users (a token file, a sweep spec, a trial config).
#pragma once

#include <string>

namespace ablate {

// Why `path` cannot be read as a stream of text: "not a regular file (it is a directory)" for a
// folder, "not a regular file" for a socket or a block device; "" for a regular file, a FIFO or a
// character device (`<(...)`, /dev/stdin), and for a path stat cannot see (opening it reports
// that). A folder opens as a stream that reads nothing, which read as empty text.
std::string NotATextFile(const std::string& path);

}  // namespace ablate
