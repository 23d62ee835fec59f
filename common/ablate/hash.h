// FNV-1a, 64 bits: the project's one non-cryptographic hash of bytes (config hashes, shard and
// checkpoint checksums, seeded permutations, GEMM tuning digests). Stable across releases and
// machines: stored identities depend on it, so it never changes.
#pragma once

#include <cstdint>
#include <string_view>

namespace ablate {

inline constexpr uint64_t kFnv1a64Offset = 1469598103934665603ull;

// The hash of `bytes`, continuing from `h` (the offset basis for a fresh hash).
constexpr uint64_t Fnv1a64(std::string_view bytes, uint64_t h = kFnv1a64Offset) {
  for (char c : bytes) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace ablate
