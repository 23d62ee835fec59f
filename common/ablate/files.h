// Files: whole-file reads, atomic and durable writes, folder creation, and checks on paths given by
// users (a token file, a sweep spec, a trial config). errno becomes a Status here, naming the path.
// Thread safety: stateless functions; safe from any thread and from concurrent processes.
#pragma once

#include <string>
#include <string_view>

#include "ablate/status.h"

namespace ablate {

// The bytes of the file at `path`. NotFound ("PATH: no such file") when it does not exist; other
// errors name the call and the path.
StatusOr<std::string> ReadFile(const std::string& path);

// Writes `content` to `path` atomically and durably: a uniquely named temporary file in the same
// folder (pid and a counter, so concurrent writers of one path never share it), fsync, rename,
// fsync of the folder. A crash or a kill leaves the old file or the new one, never a mix, and no
// reader sees a partial file. The folder must exist (MakeDirs).
Status WriteFileAtomic(const std::string& path, std::string_view content, int mode = 0644);

// Creates `path` and its missing parents (mode 0755), each new folder's entry made durable (its
// parent fsynced) before anything is put inside it. OK when it already exists as a folder;
// FailedPrecondition when it exists as something else; InvalidArgument for "".
Status MakeDirs(const std::string& path);

// fsync of a folder, so that a rename, a create or an unlink inside it survives a power cut.
Status FsyncDir(const std::string& dir);

// The folder part of a path ("a/b/c" -> "a/b", "c" -> ".", "/c" -> "/").
std::string DirName(const std::string& path);

bool FileExists(const std::string& path);

// Why `path` cannot be read as a stream of text: "not a regular file (it is a directory)" for a
// folder, "not a regular file" for a socket or a block device; "" for a regular file, a FIFO or a
// character device (`<(...)`, /dev/stdin), and for a path stat cannot see (opening it reports
// that). A folder opens as a stream that reads nothing, which read as empty text.
std::string NotATextFile(const std::string& path);

}  // namespace ablate
