#!/usr/bin/env bash
# Builds the libFuzzer targets with clang, ASan and UBSan (build-fuzz/), and runs each for a bounded
# time on its seed corpus (tests/fuzz/corpus/<target>): the trial-config parser, the sweep-spec
# parser/expander, the llm.c shard reader and the HTTP API request handling. Fails on any
# crash, hang or sanitizer report.
#   scripts/fuzz.sh [SECONDS_PER_TARGET]     (default $ABLATE_FUZZ_SECONDS or 30)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
seconds="${1:-${ABLATE_FUZZ_SECONDS:-30}}"
build="${ABLATE_FUZZ_BUILD_DIR:-$root/build-fuzz}"
CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DABLATE_FUZZ=ON -DABLATE_CUDA=OFF -DABLATE_BUILD_TESTS=OFF >/dev/null
targets=(trial_config sweep_spec shard_reader http_api)
cmake --build "$build" -j "$(nproc)" --target "${targets[@]/#/fuzz_}"
for t in "${targets[@]}"; do
  work="$build/corpus-$t"
  mkdir -p "$work"
  echo "fuzz: $t for ${seconds}s"
  # New inputs go to the scratch corpus; the committed seeds are read-only.
  "$build/tests/fuzz/fuzz_$t" "$work" "$root/tests/fuzz/corpus/$t" -max_total_time="$seconds" \
    -max_len=65536 -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 2>"$build/fuzz_$t.log" ||
    { tail -50 "$build/fuzz_$t.log" >&2; echo "fuzz: $t FAILED (log $build/fuzz_$t.log)" >&2; exit 1; }
  grep -E "stat::number_of_executed_units" "$build/fuzz_$t.log" | sed "s/^/fuzz: $t: /"
done
echo "fuzz: all targets ran ${seconds}s each without a crash or sanitizer report"
