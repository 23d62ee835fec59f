// Private: the read-only SQL runner behind Store::Query (see store.h for the contract).
#pragma once

#include <cstddef>
#include <string>

#include "ablate/status.h"
#include "store/store.h"

namespace ablate::server {

struct ReadOnlyQueryLimits {
  int timeout_ms = 5000;
  int max_rows = 10000;
  int busy_timeout_ms = 5000;
  int max_value_bytes = 16 << 20;  // SQLITE_LIMIT_LENGTH: no multi-gigabyte randomblob()
  size_t max_result_bytes = size_t(48) << 20;  // all cells together (the CLI accepts 64 MB)
};

// Opens `path` with SQLITE_OPEN_READONLY, sets query_only, an authorizer that allows only
// SELECT/READ/FUNCTION/RECURSIVE (minus load_extension and friends), a progress handler that stops
// the statement at the time limit, then runs exactly one statement and returns at most max_rows
// rows. Thread safety: each call uses its own connection; safe from any thread.
StatusOr<QueryResult> RunReadOnlyQuery(const std::string& path, const std::string& sql,
                                       const ReadOnlyQueryLimits& limits);

}  // namespace ablate::server
