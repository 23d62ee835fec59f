// Small helpers of the worker agent: log tails and signal names (files: ablate/files.h; UTF-8
// cleaning for protobuf string fields: ablate/utf8.h).
// Thread safety: stateless functions; safe from any thread.
#pragma once

#include <string>
#include <string_view>

#include "ablate/files.h"
#include "ablate/status.h"
#include "ablate/utf8.h"  // SanitizeUtf8, for a trainer's stderr and output

namespace ablate::agent {

// The end of a log file: at most `max_bytes` bytes and at most `max_lines` lines (a first line cut
// by the byte limit is dropped), as valid UTF-8. "" when the file is missing or empty.
std::string ReadLogTail(const std::string& path, size_t max_bytes = 64 * 1024,
                        size_t max_lines = 200);

// "SIGKILL", "SIGTERM", ... ("SIG<n>" for unknown numbers).
std::string SignalName(int sig);

}  // namespace ablate::agent
