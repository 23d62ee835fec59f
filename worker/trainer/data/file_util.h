// Whole-file reads and atomic writes shared by the data loaders (internal to ablate_trainer_data).
#pragma once

#include <string>
#include <string_view>

#include "ablate/status.h"

namespace ablate::trainer::internal {

// The bytes of the file at `path`. NOT_FOUND etc. from errno, naming the path.
StatusOr<std::string> ReadFile(const std::string& path);

// Writes `data` to `path` through a uniquely named temporary file in the same folder and a rename,
// creating the folder when needed: concurrent writers of the same content are safe and a reader
// never sees a partial file.
Status WriteFileAtomically(const std::string& path, std::string_view data);

}  // namespace ablate::trainer::internal
