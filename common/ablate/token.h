// Bearer tokens for RPC and HTTP authentication (docs/design.md, "Security").
//
// A token file holds one line: the token (64 hex characters from /dev/urandom). A --token-file that
// names an existing file uses its token; one that names a missing file gets a new token, written
// with mode 0600 (atomically: a temporary file in the same folder, then rename). A token file that
// other users can read is refused.
//
// Clients send the token as the gRPC metadata / HTTP header `authorization: Bearer <token>`.
#pragma once

#include <string>

#include "ablate/status.h"

namespace ablate {

// Reads the token in `path`, creating the file with a fresh token when it does not exist.
StatusOr<std::string> LoadOrCreateToken(const std::string& path);
// Reads the token in `path`; NotFound when missing.
StatusOr<std::string> ReadToken(const std::string& path);
// 64 hex characters of /dev/urandom.
StatusOr<std::string> GenerateToken();
// Constant-time comparison of two tokens.
bool TokenEquals(const std::string& a, const std::string& b);

inline constexpr const char* kAuthMetadataKey = "authorization";
inline std::string BearerValue(const std::string& token) { return "Bearer " + token; }
// Whether an authorization value ("Bearer <token>"; the scheme's case does not matter, RFC 7235)
// carries `token`. False for an empty `token`: no token means nobody is let in.
bool BearerMatches(const std::string& authorization, const std::string& token);

}  // namespace ablate
