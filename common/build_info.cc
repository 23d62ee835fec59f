#include "ablate/build_info.h"

#include "ablate/build_commit.h"  // generated (cmake/build_commit.cmake)

namespace ablate {

std::string_view BuildVersion() { return ABLATE_VERSION; }
std::string_view BuildCommit() { return ABLATE_BUILD_COMMIT; }

}  // namespace ablate
