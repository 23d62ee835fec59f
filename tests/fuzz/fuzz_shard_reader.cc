// libFuzzer target: the llm.c .bin shard reader, on the real file path (an in-memory file).
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "trainer/data/shards.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  int fd = ::memfd_create("shard", 0);
  if (fd < 0) return 0;
  size_t off = 0;
  while (off < size) {
    ssize_t n = ::write(fd, data + off, size - off);
    if (n <= 0) break;
    off += size_t(n);
  }
  std::vector<int32_t> tokens = {7};
  auto st = ablate::trainer::AppendShard("/proc/self/fd/" + std::to_string(fd), &tokens);
  if (st.ok()) {
    // A valid shard is exactly header + 2 bytes per token.
    if (size != size_t(ablate::trainer::kShardHeaderBytes) + 2 * (tokens.size() - 1)) __builtin_trap();
  } else if (tokens.size() != 1 || st.message().empty()) {
    __builtin_trap();  // on error the tokens are left as they were, and the error says why
  }
  ::close(fd);
  return 0;
}
