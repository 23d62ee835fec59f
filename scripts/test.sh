#!/usr/bin/env bash
# The test command: set up, build, run every test, then fuzz the parsers for a bounded time. GPU
# tests (label gpu) run only where a GPU is visible; elsewhere they are skipped. Extra arguments go
# to ctest (e.g. -L unit, -R Sage) and skip the fuzzing.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
build="${ABLATE_BUILD_DIR:-$root/build}"
exclude=()
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "test: no GPU visible; skipping tests labelled gpu" >&2
  exclude=(-LE gpu)
fi
(cd "$build" && ctest --output-on-failure -j "$(nproc)" "${exclude[@]}" "$@")
# Hostile input: the parsers under libFuzzer with ASan/UBSan, for a bounded time
# (ABLATE_FUZZ_SECONDS per target, default 30; 0 skips).
if [[ "${ABLATE_FUZZ_SECONDS:-30}" != 0 && $# -eq 0 ]]; then
  "$root/scripts/fuzz.sh" "${ABLATE_FUZZ_SECONDS:-30}"
fi
