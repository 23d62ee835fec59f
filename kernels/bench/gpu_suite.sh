#!/usr/bin/env bash
# Runs the GPU test binaries of a bundle (deploy/bundle.sh) on the GPU machine, one after the
# other, each under a time limit, and summarizes them: OUT/<test>.log per binary and OUT/suite.txt
# with "<test> rc=<status>" and the gtest summary lines ([  PASSED  ] / [  FAILED  ]) of each.
# Prints suite.txt; exits 1 if any binary failed or is missing.
#   kernels/bench/gpu_suite.sh BINDIR OUT [TEST ...]
# Without TESTs: every GPU test binary of the project (the ctest label gpu; data_parallel_test
# skips with fewer than two GPUs):
#   fpa_gpu_test sagebwd_gpu_test determinism_gpu_test wgmma_gpu_test sage_scale_gpu_test layers_gpu_test
#   gemm_tuning_gpu_test
#   spectral_gpu_test gpt_cuda_test train_cuda_test optim_gpu_test data_parallel_test
# GPU_SUITE_TIMEOUT: seconds per binary (default 300).
set -uo pipefail
bindir="${1:?usage: gpu_suite.sh BINDIR OUT [TEST ...]}"
out="${2:?usage: gpu_suite.sh BINDIR OUT [TEST ...]}"
shift 2
tests=("$@")
if [ "${#tests[@]}" -eq 0 ]; then
  tests=(fpa_gpu_test sagebwd_gpu_test determinism_gpu_test wgmma_gpu_test sage_scale_gpu_test layers_gpu_test
         gemm_tuning_gpu_test
         spectral_gpu_test gpt_cuda_test train_cuda_test optim_gpu_test data_parallel_test)
fi
mkdir -p "$out"
: >"$out/suite.txt"
failed=0
for t in "${tests[@]}"; do
  case "$t" in */* | "" | . | ..) echo "gpu_suite.sh: $t: a binary's name, not a path" >&2; exit 2 ;; esac
  if [ ! -x "$bindir/$t" ]; then
    echo "$t missing ($bindir/$t)" >>"$out/suite.txt"
    failed=1
    continue
  fi
  timeout "${GPU_SUITE_TIMEOUT:-300}" "$bindir/$t" >"$out/$t.log" 2>&1
  rc=$?
  echo "$t rc=$rc" >>"$out/suite.txt"
  grep -E '^\[  (PASSED|FAILED)  \]' "$out/$t.log" | tail -3 >>"$out/suite.txt"
  [ "$rc" -eq 0 ] || failed=1
done
cat "$out/suite.txt"
exit "$failed"
