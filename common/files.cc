#include "ablate/files.h"

#include <sys/stat.h>

namespace ablate {

std::string NotATextFile(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return "";
  if (S_ISREG(st.st_mode) || S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode)) return "";
  return S_ISDIR(st.st_mode) ? "not a regular file (it is a directory)" : "not a regular file";
}

}  // namespace ablate
