// The build of this program: its release version (the project's VERSION in CMakeLists.txt) and
// the source commit it was built from (`git describe --dirty` at build time, "unknown" outside a
// git checkout). ablate-train reports both with the numerics version (kernels/numerics_version.h)
// in its start line; the coordinator stores them per attempt (provenance).
#pragma once

#include <string_view>

namespace ablate {

std::string_view BuildVersion();
std::string_view BuildCommit();

}  // namespace ablate
