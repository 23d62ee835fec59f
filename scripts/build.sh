#!/usr/bin/env bash
# Configures and builds ablate into build/ (override with ABLATE_BUILD_DIR). Extra arguments go to
# the CMake configure step, e.g. scripts/build.sh -DABLATE_CUDA=OFF. ccache is used when present
# (scripts/setup.sh installs it), so a second clone or a rebuild recompiles only what changed.
# ABLATE_BUILD_TARGETS: the targets to build, separated by spaces (default: everything, tests
# included); scripts/run.sh builds only the four programs. They land in build/bin/.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${ABLATE_BUILD_DIR:-$root/build}"
jobs="${ABLATE_JOBS:-$(nproc)}"
launcher=()
if command -v ccache >/dev/null 2>&1; then
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(dirname "$root")}" CCACHE_NOHASHDIR=1
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache
            -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" "$@" >/dev/null
targets=()
for t in ${ABLATE_BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$build" -j "$jobs" "${targets[@]}"
