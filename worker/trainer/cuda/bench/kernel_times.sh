#!/usr/bin/env bash
# Every kernel of two short ablate-train runs under Nsight Compute (duration only, clocks left
# alone; ncu runs the kernels one at a time), of STEPS and of 2 x STEPS training steps; the
# difference, per kernel name and per step (kernel_times.py), is what a training step runs, without
# the start-up, the final evaluation and the checkpoint both runs share. For the kernels the step
# profile (--profile) only counts by kind. Needs ncu with counter access (the Firecracker H100
# machines).
#   worker/trainer/cuda/bench/kernel_times.sh ABLATE_TRAIN OUT [SHAPE | CONFIG.yaml] [STEPS]
# SHAPE: one of bench_config.sh's BENCH_SHAPES (default gpt2s, fpa); CONFIG.yaml: any trial
# config (its train.steps replaced). STEPS: default 2. Writes OUT/steps_<n>.{yaml,ncu-rep,csv,log}
# for both runs and OUT/kernels.md (printed).
set -uo pipefail
usage="usage: kernel_times.sh ABLATE_TRAIN OUT [SHAPE | CONFIG.yaml] [STEPS]"
train="${1:?$usage}"
out="${2:?$usage}"
what="${3:-gpt2s}"
steps="${4:-2}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/bench_config.sh"
[ -x "$train" ] || { echo "kernel_times.sh: $train is not an executable" >&2; exit 2; }
[[ "$steps" =~ ^[1-9][0-9]*$ ]] || { echo "kernel_times.sh: STEPS must be a positive number, not '$steps'" >&2; exit 2; }
command -v ncu >/dev/null || { echo "kernel_times.sh: ncu is not on the PATH" >&2; exit 2; }
mkdir -p "$out"
if [[ "$what" == *.yaml ]]; then
  [ -f "$what" ] || { echo "kernel_times.sh: no config $what" >&2; exit 2; }
  cp "$what" "$out/base.yaml"
  title="$what"
else
  found=""
  for sh in "${BENCH_SHAPES[@]}"; do
    read -r name T heads micro <<<"$sh"
    [ "$name" = "$what" ] && found="$T $heads $micro"
  done
  [ -n "$found" ] || { echo "kernel_times.sh: unknown shape $what (${BENCH_SHAPES[*]%% *})" >&2; exit 2; }
  read -r T heads micro <<<"$found"
  python3 "$here/toy_corpus.py" "$out/corpus.txt"
  bench_trial_yaml "$out/corpus.txt" fpa 100 "$T" "$heads" "$micro" >"$out/base.yaml"
  title="$what (bench_config.sh, fpa)"
fi
# The resolved config (JSON is YAML) with train.steps set, for each of the two runs.
"$train" --config "$out/base.yaml" --print-config >"$out/base.json" 2>"$out/base.err" ||
  { echo "kernel_times.sh: not a valid trial config:" >&2; cat "$out/base.err" >&2; exit 2; }
for n in "$steps" $((2 * steps)); do
  python3 - "$out/base.json" "$n" >"$out/steps_$n.yaml" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))["config"]
n = int(sys.argv[2])
c["train"].update(steps=n, warmup=min(c["train"]["warmup"], n), eval_every=0, checkpoint_every=0,
                  diagnostics_every=0)
print(json.dumps(c))
PY
  ncu --clock-control none --metrics gpu__time_duration.sum --force-overwrite -o "$out/steps_$n" \
    "$train" --config "$out/steps_$n.yaml" --out "$out/run_$n" >"$out/steps_$n.log" 2>&1 ||
    { echo "kernel_times.sh: the profiled run of $n steps failed:" >&2; tail -5 "$out/steps_$n.log" >&2; exit 1; }
  rm -rf "$out/run_$n/checkpoints"
  ncu --import "$out/steps_$n.ncu-rep" --page raw --csv >"$out/steps_$n.csv" 2>"$out/import.err" ||
    { echo "kernel_times.sh: ncu --import failed" >&2; cat "$out/import.err" >&2; exit 1; }
done
python3 "$here/kernel_times.py" --steps "$steps" --title "$title, $steps steps" \
  --base "$out/steps_$steps.csv" "$out/steps_$((2 * steps)).csv" | tee "$out/kernels.md"
