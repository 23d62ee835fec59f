#!/usr/bin/env bash
# The GPU-sharing benchmark (docs/bench/gpu_sharing.md): one small-model sweep run one trial per
# GPU and shared k = 2, 4, 8 per GPU (CUDA MPS when the host has nvidia-cuda-mps-control), one after
# the other by the whole system (ablated, one ablate-worker --gpus all, SQLite), in one call; then a
# learning-rate sweep with and without ASHA. Prints a markdown report (also OUT/sharing.md):
#   - per run: wall time (first start to last end), trials per GPU-hour and its ratio to the
#     one-per-GPU run, nvidia-smi utilization over that window, start-up (startup_s: assignment to
#     first step) and tear-down per trial, and whether each trial's final val_loss equals the same
#     trial's in the one-per-GPU run (fpa attention: bit-identical reruns);
#   - ASHA against the full grid: GPU time (wall time on the one GPU) to the end, the best
#     configuration of each (mean final val_loss over seeds), and whether it is the same;
#   - a fault: the same small sweep shared 1/4, one trial's trainer faulting on purpose at step 200
#     (ABLATE_INJECT_DEVICE_FAULT_*): the states and attempts of every trial, and whether the
#     others' final losses equal their one-per-GPU run.
#
#   scripts/gpu_sharing_bench.sh --bundle ablate-*.tar.gz --out OUT [--steps S] [--runs R]
#                                [--gemm-tuning]
#     --bundle F     a tarball or unpacked bundle of deploy/bundle.sh --tar
#     --steps S      training steps per trial (default 1024; 8,192 tokens each)
#     --runs R       which runs, comma-separated (default whole,k2,k4,k8,asha,fault; whole
#                    first: the others compare with it; asha is held to k4, the same grid)
#     --gemm-tuning  tune the sweep model's GEMMs first (ablate-train --tune-gemm, OUT/gemm_tuning.*)
#                    and start the worker with --gemm-tuning, so every run replays the table (its
#                    ratios are then against a tuned one-per-GPU run: compare with a run without)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/bundle_cluster.sh"
bundle="" out="" steps=1024 runs="whole,k2,k4,k8,asha,fault" tune=0
while (($#)); do
  case "$1" in
    --bundle) bundle="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --gemm-tuning) tune=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "gpu_sharing_bench: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -n "$bundle" && -n "$out" ]] || { echo "usage: gpu_sharing_bench.sh --bundle F --out OUT" >&2; exit 2; }
[[ "$steps" =~ ^[0-9]+$ ]] || { echo "gpu_sharing_bench: --steps wants a number" >&2; exit 2; }
[[ "$runs" =~ ^[a-z0-9,]+$ ]] || { echo "gpu_sharing_bench: bad --runs" >&2; exit 2; }
mkdir -p "$out"
out="$(cd "$out" && pwd)"
root="$(bundle_root "$bundle" "$out")"

clean_env=(env -i "PATH=/usr/bin:/bin:/usr/local/bin" "HOME=$out")
mkdir -p "$out/worker" "$out/specs"
start_coordinator

# The recorded small GPU sweeps' model (docs/RESULTS.md): a 7.2M-parameter byte-level GPT, fpa
# attention (bit-identical reruns), AdamW, 8,192 tokens per step.
base_yaml() {  # the trial config every sweep's trials share, each line indented by $1
  sed "s/^/$1/" <<YAML
data:      {corpus: brown, val_fraction: 0.05, eval_batches: 8}
model:     {seq_len: 256, layers: 4, d_model: 384, heads: 6, mlp: gelu, tie_embeddings: true}
attention: {kind: fpa, qk_norm: true}
optimizer: {kind: adamw, lr_vector: 0.002, weight_decay: 0.0}
train:     {steps: $steps, tokens_per_step: 8192, micro_batch: 32, warmup: 50, schedule: cosine,
            grad_clip: 1.0, eval_every: 128, diagnostics_every: 0, checkpoint_every: 512}
device: cuda
YAML
}
worker_flags=()
if ((tune)); then
  base_yaml "" >"$out/gemm_tuning.yaml"
  "${clean_env[@]}" "$root/bin/ablate-train" --config "$out/gemm_tuning.yaml" \
    --tune-gemm "$out/gemm_tuning.json" >"$out/gemm_tuning.txt" 2>"$out/gemm_tuning.err" ||
    { echo "gpu_sharing_bench: --tune-gemm failed:" >&2; tail -5 "$out/gemm_tuning.err" >&2; exit 1; }
  worker_flags=(--gemm-tuning "$out/gemm_tuning.json")
fi
start_worker() {  # extra environment for the trainers, as NAME=VALUE words
  "${clean_env[@]}" "$@" "$root/bin/ablate-worker" --coordinator "$addr" \
    --token-file "$coord/token" --gpus all --work-dir "$out/worker" --mps auto \
    "${worker_flags[@]}" >>"$out/worker.log" 2>&1 &
  worker_pid=$!
}
start_worker
nvidia-smi --query-gpu=timestamp,index,utilization.gpu,memory.used --format=csv,noheader \
  -lms 250 >"$out/nvidia_smi.csv" 2>/dev/null &
smi_pid=$!

spec() {  # name gpus lrs seeds [early_stop]
  cat >"$out/specs/$1.yaml" <<EOF
name: $1
base:
$(base_yaml "  ")
grid: {optimizer.lr: [$3]}
seeds: [$4]
order: grid
resources: {gpus: $2}
max_attempts: 2
${5:-}
EOF
  echo "$out/specs/$1.yaml"
}
run_sweep() {  # spec -> waits until its sweep is done (canceled after ${SWEEP_DEADLINE:-200} s)
  "${cli[@]}" submit "$1" >/dev/null
  local name t0
  name="$(basename "$1" .yaml)"
  t0=$(date +%s)
  while [[ "$(q1 "SELECT count(*) FROM trials t JOIN sweeps s ON s.id = t.sweep_id WHERE
      s.name = '$name' AND t.state IN ('queued', 'running')")" != 0 ]]; do
    if (($(date +%s) - t0 > ${SWEEP_DEADLINE:-200})); then
      echo "gpu_sharing_bench: $name: past its deadline, canceled" >&2
      "${cli[@]}" cancel "$name" >/dev/null || true
    fi
    sleep 0.5
  done
  echo "gpu_sharing_bench: $name done after $(($(date +%s) - t0)) s" >&2
}

lrs12="0.0002, 0.0003, 0.0005, 0.0007, 0.001, 0.0015, 0.002, 0.003, 0.004, 0.006, 0.008, 0.012"
IFS=, read -ra want <<<"$runs"
for r in "${want[@]}"; do
  case "$r" in
    whole) run_sweep "$(spec whole 1 "$lrs12" "0, 1")" ;;
    k2) run_sweep "$(spec k2 0.5 "$lrs12" "0, 1")" ;;
    k4) run_sweep "$(spec k4 0.25 "$lrs12" "0, 1")" ;;  # also the full grid ASHA is held to
    k8) run_sweep "$(spec k8 0.125 "$lrs12" "0, 1")" ;;
    asha) run_sweep "$(spec asha 0.25 "$lrs12" "0, 1" \
            "early_stop: {rule: asha, metric: val_loss, grace_steps: 256, reduction: 3}")" ;;
    fault)
      # The worker again, its trainers told to fault at step 200 if they are the sweep's first
      # trial (queued before the worker is back, so its id is known).
      kill "$worker_pid" && wait "$worker_pid" 2>/dev/null || true
      "${cli[@]}" submit "$(spec fault 0.25 "0.001, 0.002" "0, 1")" >/dev/null
      first="$(q1 "SELECT min(t.id) FROM trials t JOIN sweeps s ON s.id = t.sweep_id WHERE
                   s.name = 'fault'")"
      start_worker ABLATE_INJECT_DEVICE_FAULT_AT_STEP=200 ABLATE_INJECT_DEVICE_FAULT_TRIAL="$first"
      run_sweep "$out/specs/fault.yaml"
      q "SELECT a.trial_id, a.attempt, a.state, a.exit_code, a.gpu_share, substr(a.reason, 1, 90)
         AS reason FROM attempts a JOIN trials t ON t.id = a.trial_id JOIN sweeps s ON
         s.id = t.sweep_id WHERE s.name = 'fault' ORDER BY a.trial_id, a.attempt" \
        >"$out/fault_attempts.csv" ;;
    *) echo "gpu_sharing_bench: unknown run $r" >&2; exit 2 ;;
  esac
done
kill "$smi_pid" 2>/dev/null || true
smi_pid=""

{
  if ((tune)); then
    echo "Every run replayed the GEMM tuning table $out/gemm_tuning.json (ablate-train --tune-gemm"
    echo "of the sweep's model; $(tail -1 "$out/gemm_tuning.txt"))."
    echo
  fi
  python3 "$here/gpu_sharing_report.py" "$out"
} | tee "$out/sharing.md"
