// Checkpoints: model weights, optimizer state, data position and loop state in one file.
//
// Layout: "ABLATECK" | u32 version | u64 header length | header JSON | u64 section count |
// sections (u64 length + bytes each: weights as float32, then the optimizer's state blob) |
// u64 FNV-1a checksum of everything before it. Little-endian. Written atomically (WriteFileAtomic,
// ablate/files.h): a crash leaves the old file or the new one.
// Loading checks the magic, version, lengths and checksum and says which one failed.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ablate/status.h"

namespace ablate::trainer {

struct Checkpoint {
  nlohmann::json header;              // step, config, config_hash, sampler state, loop state, ...
  std::vector<std::string> sections;  // raw payloads, in the order they were added
};

Status WriteCheckpointAtomic(const std::string& path, const Checkpoint& ckpt);
StatusOr<Checkpoint> ReadCheckpoint(const std::string& path);

}  // namespace ablate::trainer
