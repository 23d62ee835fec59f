#!/usr/bin/env bash
# The run command: set up, build the four programs (into build/bin/), and run the main job on this
# machine — a local coordinator (ablated), a local worker (ablate-worker: every GPU it finds, else
# CPU slots), a default sweep (examples/sweeps/quick.yaml: attention kind x spectral power p x 2
# seeds of a tiny GPT on the Brown corpus), live progress, and the ablation table. State lives in
# out/local/ (SQLite database, token, worker folders, logs).
#
# When the sweep is done the coordinator and the worker keep serving in the background (their pids
# in out/local/ablated.pid and ablate-worker.pid), so the dashboard stays up and the CLI commands printed
# at the end work; a rerun stops them first and starts a fresh pair on the same state.
#   scripts/run.sh [SPEC.yaml]      another sweep spec instead of the default
#   scripts/run.sh stop             stop the coordinator and worker a run left serving
# Environment: ABLATE_SERVE=0 stops both at the end instead, ABLATE_RUN_DIR (default out/local),
# ABLATE_CPU_SLOTS (default: the number of cores; the example sweeps run one thread per trial),
# ABLATE_DATA_ROOT (the folder trial configs may read corpora from besides the built-in ones;
# default: this repository), ABLATE_HTTP (the dashboard's address; default 127.0.0.1, any port).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
run="${ABLATE_RUN_DIR:-$root/out/local}"
build="${ABLATE_BUILD_DIR:-$root/build}"
bin="$build/bin"

# The pid in <run>/<name>.pid when that process is still the program `name` (a pid file outlives
# its process, and the pid may belong to something else by now); nothing otherwise.
live_pid() {
  local file="$run/$1.pid" pid argv0
  [[ -s "$file" ]] || return 0
  pid="$(cat "$file")"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 0
  argv0="$(tr '\0' '\n' 2>/dev/null <"/proc/$pid/cmdline" | head -n 1)" || return 0
  [[ "$(basename -- "$argv0")" == "$1" ]] && echo "$pid"
  return 0
}

# Stops the program `name` started by an earlier run: SIGTERM (ablate-worker drains: running
# trials finish), a second SIGTERM after 10 s (the worker kills its trials), SIGKILL after 20 s.
stop_one() {
  local name="$1" pid
  pid="$(live_pid "$name")"
  if [[ -n "$pid" ]]; then
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 200); do
      kill -0 "$pid" 2>/dev/null || break
      ((i == 100)) && kill -TERM "$pid" 2>/dev/null
      sleep 0.1
    done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
    echo "stopped $name (pid $pid)"
  fi
  rm -f "$run/$name.pid"
}
stop_pair() {
  stop_one ablate-worker  # first, so that its last reports reach the coordinator
  stop_one ablated
}

if [[ "${1:-}" == stop ]]; then
  [[ -n "$(live_pid ablated)$(live_pid ablate-worker)" ]] || echo "nothing is serving from $run"
  stop_pair
  exit 0
fi

spec="${1:-$root/examples/sweeps/quick.yaml}"
serve="${ABLATE_SERVE:-1}"
slots="${ABLATE_CPU_SLOTS:-$(nproc)}"
# Set in the caller's shell, these would beat ABLATE_DATA_DIR in the commands printed at the end.
caller_env="${ABLATE_COORDINATOR:-}${ABLATE_TOKEN_FILE:-}"
"$root/scripts/setup.sh"
ABLATE_BUILD_TARGETS="ablated ablate ablate-worker ablate-train" "$root/scripts/build.sh"
mkdir -p "$run"

ablated="$bin/ablated"
worker="$bin/ablate-worker"
ablate="$bin/ablate"
stop_pair  # the pair an earlier run left serving
rm -f "$run/coordinator/ablated.addr" "$run/coordinator/ablated.http"  # state persists: a rerun adds only what is missing

# Starts a program in its own session (it outlives this script and its terminal), logging to
# `log`; the program itself writes <run>/<name>.pid (setsid may fork, so $! is not its pid).
start_detached() {
  local name="$1" log="$2"
  shift 2
  rm -f "$run/$name.pid"
  setsid bash -c 'echo $$ >"$0"; exec "$@"' "$run/$name.pid" "$@" >>"$log" 2>&1 </dev/null &
  for _ in $(seq 50); do [[ -s "$run/$name.pid" ]] && break; sleep 0.1; done
}

serving=0
cleanup() {
  ((serving)) || stop_pair >/dev/null
}
trap cleanup EXIT

# --http: the JSON API and the web dashboard (web/); ABLATE_HTTP picks the address (port 0: any).
start_detached ablated "$run/ablated.log" "$ablated" --data-dir "$run/coordinator" \
  --grpc 127.0.0.1:0 --http "${ABLATE_HTTP:-127.0.0.1:0}" --web-dir "$root/web"
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
start_detached ablate-worker "$run/worker.log" "$worker" --token-file "$ABLATE_TOKEN_FILE" \
  --gpus "$gpus" --cpu-slots "$slots" --work-dir "$run/worker" \
  --data-root "${ABLATE_DATA_ROOT:-$root}" --trainer "$bin/ablate-train"
sleep 1
[[ -n "$(live_pid ablate-worker)" ]] || { echo "ablate-worker exited:" >&2; cat "$run/worker.log" >&2; exit 1; }
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
if [[ "$serve" == 0 ]]; then
  echo "dashboard: $dashboard (served while this script ran)"
  echo "To browse the results later: $ablated --data-dir $run/coordinator --grpc 127.0.0.1:0 --http 127.0.0.1:7071 --web-dir $root/web"
  echo "  and open http://127.0.0.1:7071/#token=$(cat "$ABLATE_TOKEN_FILE")"
  exit 0
fi
serving=1
stop="$root/scripts/run.sh stop"
[[ -z "${ABLATE_RUN_DIR:-}" ]] || stop="ABLATE_RUN_DIR=$run $stop"
cat <<EOF
The coordinator and the worker keep serving (pids in $run/ablated.pid and
$run/ablate-worker.pid). Next, in your shell:
EOF
[[ -z "$caller_env" ]] || echo "  unset ABLATE_COORDINATOR ABLATE_TOKEN_FILE"
cat <<EOF
  export PATH="$bin:\$PATH"
  export ABLATE_DATA_DIR=$run/coordinator
  ablate workers
  ablate status sweep:$id
  ablate results sweep:$id
  ablate submit $root/examples/sweeps/optimizer_p.yaml && ablate watch optimizer_p
dashboard: $dashboard
Stop both: $stop
EOF
