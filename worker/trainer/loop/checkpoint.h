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

// The training state of a checkpoint, without what only describes the run that wrote it (the wall
// time spent training, loop.train_time_s). Two checkpoints of the same trial at the same step hold the
// same state exactly when these are equal: a resumed run must reach the same bytes here.
nlohmann::json StateHeader(const Checkpoint& ckpt);
bool SameState(const Checkpoint& a, const Checkpoint& b);

}  // namespace ablate::trainer
