#!/usr/bin/env bash
# One GPU-machine call's worth of kernel checks and measurements, in the order that makes a broken
# kernel cheap: the wgmma building blocks, the FPA tests, the SageBwd tests with the backward lab
# (every compiled-in variant against the emulator, then timed), then the benchmark beside PyTorch
# SDPA and the comparison table. Each step's output goes to OUT/<step>.log; a failing step does
# not stop the later ones (a device fault in one binary leaves the others their own context).
#   kernels/bench/lab_run.sh BIN_DIR OUT_DIR
# BIN_DIR holds wgmma_gpu_test, fpa_gpu_test, sagebwd_gpu_test and ablate-attention-bench (a build
# tree's tests/gpu, or a bundle's bin/ with LD_LIBRARY_PATH set by the caller).
set -uo pipefail
bin="${1:?usage: lab_run.sh BIN_DIR OUT_DIR}"
out="${2:?usage: lab_run.sh BIN_DIR OUT_DIR}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mkdir -p "$out"
nvidia-smi -L >"$out/nvidia-smi-L.txt" 2>&1
step() {  # step NAME COMMAND...: runs it, keeps its log, prints its last lines and exit status
  local name="$1"
  shift
  "$@" >"$out/$name.log" 2>&1
  local rc=$?
  echo "== $name: exit $rc"
  grep -E '^\[  (PASSED|FAILED) |^\[wgmma\]|^\| ' "$out/$name.log" | tail -n 40
  return 0
}
step wgmma_gpu_test "$bin/wgmma_gpu_test"
step fpa_gpu_test "$bin/fpa_gpu_test"
step sagebwd_gpu_test env SAGE_BWD_LAB=1 "$bin/sagebwd_gpu_test"
step attention_bench "$bin/ablate-attention-bench" --json "$out/bench.json"
step sdpa_bench python3 "$here/sdpa_bench.py" --json "$out/sdpa.json"
python3 "$here/compare.py" "$out/bench.json" "$out/sdpa.json" >"$out/compare.md" 2>&1 &&
  cat "$out/compare.md"
