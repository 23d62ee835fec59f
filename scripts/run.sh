#!/usr/bin/env bash
# The run command: set up, build, and run the main job on this machine — a local coordinator
# (ablated), a local worker (ablate-worker: every GPU it finds, else CPU slots), a default sweep
# (examples/sweeps/quick.yaml: attention kind x spectral power p x 2 seeds of a tiny GPT on the
# Brown corpus), live progress, and the ablation table. State lives in out/local/ (SQLite database,
# token, worker folders, logs); the coordinator and worker stop when the sweep is done.
#   scripts/run.sh [SPEC.yaml]      another sweep spec instead of the default
# Environment: ABLATE_RUN_DIR (default out/local), ABLATE_CPU_SLOTS (default: the number of cores;
# the example sweeps run one thread per trial), ABLATE_DATA_ROOT (the folder trial configs may read
# corpora from besides the built-in ones; default: this repository).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
spec="${1:-$root/examples/sweeps/quick.yaml}"
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
build="${ABLATE_BUILD_DIR:-$root/build}"
run="${ABLATE_RUN_DIR:-$root/out/local}"
slots="${ABLATE_CPU_SLOTS:-$(nproc)}"
mkdir -p "$run"

ablated="$build/server/ablated"
worker="$build/worker/agent/ablate-worker"
ablate="$build/cli/ablate"
rm -f "$run/coordinator/ablated.addr" "$run/coordinator/ablated.http"  # state persists: a rerun adds only what is missing
# --http: the JSON API and the web dashboard (web/); ABLATE_HTTP picks the address (port 0: any).
"$ablated" --data-dir "$run/coordinator" --grpc 127.0.0.1:0 --http "${ABLATE_HTTP:-127.0.0.1:0}" \
  --web-dir "$root/web" >>"$run/ablated.log" 2>&1 &
coordinator_pid=$!
cleanup() {
  [[ -n "${worker_pid:-}" ]] && kill "$worker_pid" 2>/dev/null && wait "$worker_pid" 2>/dev/null
  kill "$coordinator_pid" 2>/dev/null && wait "$coordinator_pid" 2>/dev/null
  true
}
trap cleanup EXIT
for _ in $(seq 100); do [[ -s "$run/coordinator/ablated.addr" ]] && break; sleep 0.1; done
for _ in $(seq 100); do [[ -s "$run/coordinator/ablated.http" ]] && break; sleep 0.1; done
[[ -s "$run/coordinator/ablated.addr" && -s "$run/coordinator/ablated.http" ]] || { cat "$run/ablated.log" >&2; exit 1; }
export ABLATE_COORDINATOR="$(cat "$run/coordinator/ablated.addr")"
export ABLATE_TOKEN_FILE="$run/coordinator/token"
echo "coordinator: $ABLATE_COORDINATOR (log $run/ablated.log)"
dashboard="http://$(cat "$run/coordinator/ablated.http")/#token=$(cat "$ABLATE_TOKEN_FILE")"
echo "dashboard: $dashboard"

gpus=all
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 || gpus=none
"$worker" --token-file "$ABLATE_TOKEN_FILE" --gpus "$gpus" --cpu-slots "$slots" --work-dir "$run/worker" \
  --data-root "${ABLATE_DATA_ROOT:-$root}" \
  --trainer "$build/worker/trainer/ablate-train" >>"$run/worker.log" 2>&1 &
worker_pid=$!
sleep 1
kill -0 "$worker_pid" 2>/dev/null || { echo "ablate-worker exited:" >&2; cat "$run/worker.log" >&2; exit 1; }
echo "worker: gpus=$gpus cpu-slots=$slots (log $run/worker.log)"

# The sweep by its id, from the coordinator's answer (a spec's name may be quoted or flow-styled).
submitted="$("$ablate" submit "$spec" --format json)"
id="$(printf '%s\n' "$submitted" | sed -n 's/^ *"sweep_id": *\([0-9][0-9]*\).*/\1/p')"
[[ -n "$id" ]] || { echo "unexpected answer to submit: $submitted" >&2; exit 1; }
field() { printf '%s\n' "$submitted" | sed -n "s/^ *\"$1\": *\"\{0,1\}\([^\",]*\)\"\{0,1\},\{0,1\}\$/\1/p"; }
echo "sweep $(field sweep_name) (id $id): $(field total_trials) trials, $(field new_trials) new"
"$ablate" watch "sweep:$id" || true
echo
"$ablate" results "sweep:$id"
echo
echo "Everything is stored in $run/coordinator/ablate.db (schema: server/store/README.md)."
echo "dashboard: $dashboard (served while this script ran)"
echo "To browse the results later: $ablated --data-dir $run/coordinator --grpc 127.0.0.1:0 --http 127.0.0.1:7071 --web-dir $root/web"
echo "  and open http://127.0.0.1:7071/#token=$(cat "$ABLATE_TOKEN_FILE")"
