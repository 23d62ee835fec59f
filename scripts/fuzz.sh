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
# Binary seeds are made here rather than committed: a valid llm.c shard (5 tokens), the input
# that once crashed the config parser (invalid UTF-8 in a string field), and the one that made
# YAML::LoadAll loop.
seeds="$build/seeds"
mkdir -p "$seeds/shard_reader" "$seeds/trial_config" "$seeds/sweep_spec" "$seeds/http_api"
python3 - "$seeds" <<'PY'
import struct, sys
seeds = sys.argv[1]
header = [20240520, 1, 5] + [0] * 253
open(f"{seeds}/shard_reader/valid.bin", "wb").write(struct.pack("<256i", *header) + struct.pack("<5H", 1, 2, 3, 4, 5))
open(f"{seeds}/trial_config/regress-invalid-utf8", "wb").write(b"# The README" + b"\xd4" * 60)
# The input on which YAML::LoadAll (yaml-cpp 0.7) looped for good: both YAML parsers.
loop = (b"# The README" + b"\xd4" * 35 +
        b"mizer: {kind: spectral, family: rms, p: 0.5, lr: 0.01, lr_vector: 0.003, "
        b"newton_iters: 15}ari:tn\n   , {steps: 200, tokens_per_step: 4096, micro_batch: 32, "
        b"warmup: 20, schedule: " + b"\xd4" * 25)
for t in ("trial_config", "sweep_spec"):
    open(f"{seeds}/{t}/regress-loadall-loop", "wb").write(loop)
PY
for t in "${targets[@]}"; do
  work="$build/corpus-$t"
  mkdir -p "$work"
  corpora=("$work" "$seeds/$t")
  [[ -d "$root/tests/fuzz/corpus/$t" ]] && corpora+=("$root/tests/fuzz/corpus/$t")
  echo "fuzz: $t for ${seconds}s"
  # New inputs go to the scratch corpus; the committed seeds are read-only.
  "$build/tests/fuzz/fuzz_$t" "${corpora[@]}" -max_total_time="$seconds" \
    -max_len=65536 -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 2>"$build/fuzz_$t.log" ||
    { tail -50 "$build/fuzz_$t.log" >&2; echo "fuzz: $t FAILED (log $build/fuzz_$t.log)" >&2; exit 1; }
  grep -E "stat::number_of_executed_units" "$build/fuzz_$t.log" | sed "s/^/fuzz: $t: /"
done
echo "fuzz: all targets ran ${seconds}s each without a crash or sanitizer report"
