#!/usr/bin/env bash
# GPU sharing's fault isolation on a real GPU (label gpu; exits 77, a skip, without one): two
# ablate-train processes share the GPU, one faults on purpose at step 100
# (ABLATE_INJECT_DEVICE_FAULT_AT_STEP: an illegal address), first without MPS, then under an MPS
# control daemon of its own. The faulting trainer must exit 76 (a fatal device error,
# cudaErrorIllegalAddress). Without MPS its neighbour must finish (exit 0). Under MPS the neighbour
# may finish or die of the same error (exit 76: MPS ends every client of the GPU); the coordinator
# then reruns both alone, where only the faulting one fails (tests/unit/server/scheduler/
# placement_test.cc); what it must never do is fail any other way.
#   tests/gpu/worker/sharing/shared_gpu_fault_test.sh ABLATE_TRAIN [OUT]
set -uo pipefail
train="${1:?usage: shared_gpu_fault_test.sh ABLATE_TRAIN [OUT]}"
out="${2:-$(mktemp -d /tmp/ablate_fault_XXXXXX)}"
mkdir -p "$out"
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "no GPU: skipped"
  exit 77
fi
cat >"$out/trial.yaml" <<'YAML'
data: {corpus: brown, eval_batches: 2}
model: {seq_len: 256, layers: 4, d_model: 384, heads: 6}
attention: {kind: fpa}
optimizer: {kind: adamw, lr: 0.002}
train: {steps: 400, tokens_per_step: 8192, micro_batch: 32, eval_every: 200, diagnostics_every: 0,
        checkpoint_every: 0}
device: cuda
YAML
fail=0
pair() {  # $1: label; the environment decides MPS
  ABLATE_INJECT_DEVICE_FAULT_AT_STEP=100 "$train" --config "$out/trial.yaml" --out "$out/$1-faulting" \
    >"$out/$1-faulting.out" 2>"$out/$1-faulting.err" &
  local fpid=$!
  "$train" --config "$out/trial.yaml" --out "$out/$1-neighbour" >"$out/$1-neighbour.out" \
    2>"$out/$1-neighbour.err"
  local nrc=$?
  wait "$fpid"
  local frc=$?
  echo "$1: faulting trainer exit $frc ($(tail -c 300 "$out/$1-faulting.err" | tr '\n' ' '))"
  echo "$1: neighbour exit $nrc ($(tail -c 200 "$out/$1-neighbour.err" | tr '\n' ' '))"
  grep -q cudaErrorIllegalAddress "$out/$1-faulting.err" || { echo "FAIL: $1: no illegal address"; fail=1; }
  [[ "$frc" == 76 ]] || { echo "FAIL: $1: the faulting trainer exited $frc, not 76"; fail=1; }
  if [[ "$nrc" == 0 ]]; then
    grep -q '"status":"ok"' "$out/$1-neighbour.out" || { echo "FAIL: $1: neighbour not ok"; fail=1; }
  elif [[ "$nrc" == 76 && "$1" == mps ]]; then
    echo "$1: the neighbour died of the same fault (exit 76: rerun alone, not counted)"
  else
    echo "FAIL: $1: the neighbour exited $nrc"
    fail=1
  fi
}
pair plain
if command -v nvidia-cuda-mps-control >/dev/null 2>&1; then
  export CUDA_MPS_PIPE_DIRECTORY="$out/mps/pipe" CUDA_MPS_LOG_DIRECTORY="$out/mps/log"
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d
  pair mps
  echo quit | nvidia-cuda-mps-control
  tail -5 "$CUDA_MPS_LOG_DIRECTORY/control.log" 2>/dev/null
else
  echo "nvidia-cuda-mps-control not found: the MPS half is skipped"
fi
[[ "$fail" == 0 ]] && echo "PASSED" || echo "FAILED"
exit "$fail"
