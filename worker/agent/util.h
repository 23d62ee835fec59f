// Small helpers of the worker agent: files (errno → Status at this edge), UTF-8 cleaning for
// protobuf string fields, log tails and signal names.
// Thread safety: stateless functions; safe from any thread.
#pragma once

#include <string>
#include <string_view>

#include "ablate/status.h"
#include "ablate/utf8.h"  // SanitizeUtf8, for a trainer's stderr and output

namespace ablate::agent {

// Creates `path` and its missing parents (mode 0755). OK when it already exists as a folder.
Status MakeDirs(const std::string& path);

// Writes `content` to `path` atomically and durably: a temporary file in the same folder, fsync,
// rename, fsync of the folder. A crash leaves the old file or the new one, never a mix.
Status WriteFileAtomic(const std::string& path, std::string_view content, int mode = 0644);

// Reads a whole file. NotFound when it does not exist.
StatusOr<std::string> ReadFile(const std::string& path);

// fsync of a folder, so that a rename or unlink inside it survives a power cut.
Status FsyncDir(const std::string& dir);

// The folder part of a path ("a/b/c" → "a/b", "c" → ".").
std::string DirName(const std::string& path);

bool FileExists(const std::string& path);

// The end of a log file: at most `max_bytes` bytes and at most `max_lines` lines (a first line cut
// by the byte limit is dropped), as valid UTF-8. "" when the file is missing or empty.
std::string ReadLogTail(const std::string& path, size_t max_bytes = 64 * 1024,
                        size_t max_lines = 200);

// "SIGKILL", "SIGTERM", ... ("SIG<n>" for unknown numbers).
std::string SignalName(int sig);

}  // namespace ablate::agent
