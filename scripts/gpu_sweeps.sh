#!/usr/bin/env bash
# Runs sweeps on every GPU of this machine from a relocatable bundle (deploy/bundle.sh --tar):
# unpacks it, starts ablated and one ablate-worker for all GPUs (both from the bundle, with an empty
# environment apart from PATH/HOME, so nothing of the build machine is used), submits each SPEC,
# waits for it, and exports per sweep the ablation table (csv and the CLI's table), the trial list,
# and the GPU busy share (attempt time on GPUs / (wall time x GPUs)), plus nvidia-smi samples.
#
#   scripts/gpu_sweeps.sh --bundle ablate-0.1.0-linux-x86_64.tar.gz --out OUT SPEC.yaml [SPEC.yaml...]
#     --by AXES      results grouping (default: the sweep's axes except seed)
#     --metric NAME  results metric (default final_val_loss)
set -euo pipefail

bundle="" out="" metric="final_val_loss"
specs=()
while (($#)); do
  case "$1" in
    --bundle) bundle="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --metric) metric="$2"; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    -*) echo "gpu_sweeps: unknown option $1" >&2; exit 2 ;;
    *) specs+=("$1"); shift ;;
  esac
done
[[ -n "$bundle" && -n "$out" && ${#specs[@]} -gt 0 ]] || { sed -n '2,11p' "$0" >&2; exit 2; }
for s in "${specs[@]}"; do [[ -f "$s" ]] || { echo "gpu_sweeps: no such spec: $s" >&2; exit 2; }; done

mkdir -p "$out"
out="$(cd "$out" && pwd)"
if [[ -d "$bundle" ]]; then
  root="$(cd "$bundle" && pwd)"
else
  mkdir -p "$out/bundle"
  tar -C "$out/bundle" -xzf "$bundle"
  root="$(find "$out/bundle" -mindepth 1 -maxdepth 1 -type d | head -1)"
fi
[[ -x "$root/bin/ablated" ]] || { echo "gpu_sweeps: $root/bin/ablated missing (not a bundle?)" >&2; exit 2; }

clean_env=(env -i "PATH=/usr/bin:/bin" "HOME=$out")
coord="$out/coordinator"
mkdir -p "$coord" "$out/worker" "$out/results"
rm -f "$coord/ablated.addr" "$coord/ablated.http"
"${clean_env[@]}" "$root/bin/ablated" --data-dir "$coord" --grpc 127.0.0.1:0 --http 127.0.0.1:0 \
  >>"$out/ablated.log" 2>&1 &
coord_pid=$!
smi_pid=""
worker_pid=""
cleanup() {
  [[ -n "$smi_pid" ]] && kill "$smi_pid" 2>/dev/null || true
  [[ -n "$worker_pid" ]] && kill "$worker_pid" 2>/dev/null && wait "$worker_pid" 2>/dev/null || true
  kill "$coord_pid" 2>/dev/null && wait "$coord_pid" 2>/dev/null || true
}
trap cleanup EXIT
for _ in $(seq 100); do [[ -s "$coord/ablated.addr" ]] && break; sleep 0.1; done
[[ -s "$coord/ablated.addr" ]] || { cat "$out/ablated.log" >&2; exit 1; }
addr="$(cat "$coord/ablated.addr")"
cli=("${clean_env[@]}" "ABLATE_COORDINATOR=$addr" "ABLATE_TOKEN_FILE=$coord/token" "$root/bin/ablate")

"${clean_env[@]}" "$root/bin/ablate-worker" --coordinator "$addr" --token-file "$coord/token" \
  --gpus all --work-dir "$out/worker" --metrics 127.0.0.1:0 >>"$out/worker.log" 2>&1 &
worker_pid=$!

if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=timestamp,index,utilization.gpu,memory.used --format=csv,noheader -l 1 \
    >"$out/nvidia_smi.csv" 2>/dev/null &
  smi_pid=$!
fi

for spec in "${specs[@]}"; do
  name="$(sed -n 's/^name:[[:space:]]*\([A-Za-z0-9_.-]*\).*/\1/p' "$spec" | head -1)"
  [[ -n "$name" ]] || { echo "gpu_sweeps: $spec has no name:" >&2; exit 2; }
  echo "== $name ($spec)"
  start=$(date +%s.%N)
  "${cli[@]}" submit "$spec"
  "${cli[@]}" watch "$name" || echo "gpu_sweeps: $name finished with failed or canceled trials" >&2
  end=$(date +%s.%N)
  "${cli[@]}" results "$name" --metric "$metric" | tee "$out/results/$name.txt"
  "${cli[@]}" results "$name" --metric "$metric" --format csv >"$out/results/$name.csv"
  "${cli[@]}" status "$name" --format csv >"$out/results/$name.trials.csv" || true
  # GPU busy share: attempt seconds x GPUs held, over the sweep's wall time x the worker's GPUs.
  gpus=$("${cli[@]}" query "SELECT json_array_length(gpus_json) FROM workers LIMIT 1" --format csv | tail -1)
  busy=$("${cli[@]}" query "SELECT COALESCE(SUM((a.ended_at - a.started_at) * json_array_length(a.gpus_json)), 0) FROM attempts a JOIN trials t ON t.id = a.trial_id JOIN sweeps s ON s.id = t.sweep_id WHERE s.name = '$name' AND a.ended_at IS NOT NULL" --format csv | tail -1)
  python3 - "$name" "$start" "$end" "$gpus" "$busy" <<'EOF' | tee -a "$out/results/utilization.md"
import sys
name, start, end, gpus, busy = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4] or 0), float(sys.argv[5] or 0)
wall = end - start
share = busy / (wall * gpus) if wall > 0 and gpus > 0 else float("nan")
print(f"| {name} | {wall:.1f} s | {gpus} | {busy:.1f} GPU-s in attempts | {100 * share:.1f}% |")
EOF
done
echo "results in $out/results"
