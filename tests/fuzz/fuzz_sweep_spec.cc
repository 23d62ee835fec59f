// libFuzzer target: the sweep-spec parser and expander.
#include <cstddef>
#include <cstdint>
#include <string>

#include "sweep/sweep.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  ablate::server::ExpandOptions opt;
  opt.max_trials = 64;  // keep each input cheap; the limit itself is part of what is fuzzed
  auto s = ablate::server::ExpandSweep(text, "fuzz.yaml", opt);
  if (s.ok()) {
    if (s->trials.empty() || int(s->trials.size()) > opt.max_trials) __builtin_trap();
  } else if (s.status().message().empty()) {
    __builtin_trap();
  }
  return 0;
}
