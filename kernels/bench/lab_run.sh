#!/usr/bin/env bash
# One GPU-machine call's worth of kernel checks and measurements, in the order that makes a broken
# kernel cheap: the wgmma building blocks, the FPA tests, the SageBwd tests with the backward lab
# (every compiled-in variant against the emulator, then timed), then the benchmark beside PyTorch
# SDPA and the comparison table. Each step's output goes to OUT/<step>.log; a failing step does
# not stop the later ones (a device fault in one binary leaves the others their own context).
# Exit status 1 when any step failed (the comparison included), else 0.
#   kernels/bench/lab_run.sh BIN_DIR OUT_DIR [BASE_BENCH]
# BIN_DIR holds wgmma_gpu_test, fpa_gpu_test, determinism_gpu_test, sagebwd_gpu_test and
# ablate-attention-bench (a build tree's tests/gpu, or a bundle's bin/ with LD_LIBRARY_PATH set by
# the caller). BASE_BENCH, an ablate-attention-bench of the change's parent under another file
# name (e.g. bench-base): a same-run A/B of the two on the standard shapes and GPT-2 small's
# training shape (ab_run.sh, 2 rounds, atomics' dQ; OUT/ab/ab_ablate-attention-bench.md) after
# the tests.
set -uo pipefail
bin="${1:?usage: lab_run.sh BIN_DIR OUT_DIR [BASE_BENCH]}"
out="${2:?usage: lab_run.sh BIN_DIR OUT_DIR [BASE_BENCH]}"
base="${3:-}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mkdir -p "$out"
nvidia-smi -L >"$out/nvidia-smi-L.txt" 2>&1
failed=0
step() {  # step NAME COMMAND...: runs it, keeps its log, prints its last lines and exit status
  local name="$1"
  shift
  "$@" >"$out/$name.log" 2>&1
  local rc=$?
  echo "== $name: exit $rc"
  [ "$rc" -eq 0 ] || failed=1
  grep -E '^\[  (PASSED|FAILED) |^\[wgmma\]|^\| ' "$out/$name.log" | tail -n 40
  return 0
}
step wgmma_gpu_test "$bin/wgmma_gpu_test"
step fpa_gpu_test "$bin/fpa_gpu_test"
step determinism_gpu_test "$bin/determinism_gpu_test"
step sagebwd_gpu_test env SAGE_BWD_LAB=1 "$bin/sagebwd_gpu_test"
if [ -n "$base" ]; then
  shapes="4,16,2048,128:no 4,16,2048,128:yes 2,16,8192,128:no 2,16,8192,128:yes"
  shapes+=" 8,16,1024,64:no 8,16,1024,64:yes 16,12,1024,64:yes"  # the last: GPT-2 small's
  AB_FLAGS="--deterministic no" step ab "$here/ab_run.sh" "$out/ab" 2 "$shapes" \
    "$bin/ablate-attention-bench" "$base"
  cat "$out"/ab/ab_*.md 2>/dev/null
fi
step attention_bench "$bin/ablate-attention-bench" --json "$out/bench.json"
step sdpa_bench python3 "$here/sdpa_bench.py" --json "$out/sdpa.json"
if python3 "$here/compare.py" "$out/bench.json" "$out/sdpa.json" >"$out/compare.md" 2>&1; then
  cat "$out/compare.md"
else
  echo "== compare: failed (OUT/compare.md)"
  failed=1
fi
exit "$failed"
