// libFuzzer target: the trial-config parser (YAML → TrialConfig → validate → canonical JSON/hash).
// Any input must yield a config or a clean error Status; never a crash or a sanitizer report.
#include <cstddef>
#include <cstdint>
#include <string>

#include "ablate/trial_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  auto c = ablate::config::ParseTrialConfig(text, "fuzz.yaml");
  if (c.ok()) {
    (void)ablate::config::ConfigHash(*c);
    // The canonical JSON must parse back to the same config.
    auto again = ablate::config::ParseTrialConfig(ablate::config::ToJson(*c).dump(), "json");
    if (!again.ok() || ablate::config::ConfigHash(*again) != ablate::config::ConfigHash(*c)) {
      __builtin_trap();
    }
  } else if (c.status().message().empty()) {
    __builtin_trap();  // every error says what is wrong
  }
  return 0;
}
