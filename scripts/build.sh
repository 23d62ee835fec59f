#!/usr/bin/env bash
# Configures and builds ablate into build/ (override with ABLATE_BUILD_DIR). Extra arguments go to
# the CMake configure step, e.g. scripts/build.sh -DABLATE_CUDA=OFF.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${ABLATE_BUILD_DIR:-$root/build}"
jobs="${ABLATE_JOBS:-$(nproc)}"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$build" -j "$jobs"
