#!/usr/bin/env bash
# Slurm pilot jobs on this one machine, with Debian's slurmctld, slurmd and munge:
#   1. a private munge key and munged, a slurm.conf (cons_tres, one node = this host with its CPUs,
#      no GPUs), slurmctld and slurmd in the foreground under a scratch folder (SLURM_CONF; no
#      systemd, nothing outside the folder is touched);
#   2. a local ablated; deploy/slurm/ablate-slurm-submit submits the pilot array (2 tasks, 1 CPU each)
#      running ablate-worker from a bundle-shaped folder;
#   3. a sweep with max_attempts: 1 runs on the two Slurm-started workers; while one array task runs
#      a trial that has checkpointed, `scancel` that task: its pilot preempts the worker, the trainer
#      checkpoints and stops, and the coordinator requeues the trial, which the other worker resumes
#      from the checkpoint and completes (with max_attempts: 1 it would fail if the preempted attempt
#      counted);
#   4. checks through the ablate CLI: every trial succeeded; the preempted trial's attempts are
#      "lost" (reason "preempted: checkpointed at step N", exit code 75) on the cancelled task's
#      worker, then "succeeded" on the other one, whose trainer started from step N; the cancelled
#      pilot logged the preemption and its worker exited 0.
# Every daemon is stopped on every exit path. Skips (77) when not root or Slurm/munge are missing.
#
#   slurm_pilot_test.sh ABLATED ABLATE_WORKER ABLATE ABLATE_TRAIN
# ABLATE_SLURM_KEEP=1 keeps the scratch folder.
set -euo pipefail

(($# == 4)) || { echo "usage: $0 ABLATED ABLATE_WORKER ABLATE ABLATE_TRAIN" >&2; exit 2; }
ablated_bin="$(realpath "$1")" worker_bin="$(realpath "$2")" cli_bin="$(realpath "$3")"
train_bin="$(realpath "$4")"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
submit="$repo/deploy/slurm/ablate-slurm-submit"

skip() { echo "SKIP: $*"; exit 77; }
[[ $(id -u) -eq 0 ]] || skip "needs root (slurmd runs jobs as their user; the test submits as root)"
for t in slurmctld slurmd munged mungekey sbatch squeue scancel python3; do
  command -v "$t" >/dev/null || skip "$t is not installed (scripts/setup.sh installs slurmctld slurmd munge)"
done

start_time=$SECONDS
tmp="$(mktemp -d /tmp/ablate_slurm_XXXXXX)"
chmod 755 "$tmp"
log() { printf '[slurm-test %3ds] %s\n' "$((SECONDS - start_time))" "$*"; }
fail() {
  echo "FAIL: $*" >&2
  for f in "$tmp"/log/{ablated,slurmctld,slurmd}.log "$tmp"/pilot-logs/*.out; do
    [[ -f "$f" ]] || continue
    echo "---- $f (last 25 lines)" >&2
    tail -n 25 "$f" >&2
  done
  exit 1
}

export SLURM_CONF="$tmp/slurm.conf"
pids=()  # daemons we started, stopped in reverse order
cleanup() {
  local rc=$?
  set +e
  if [[ -f "$SLURM_CONF" ]] && [[ -n "${ctld_pid:-}" ]] && kill -0 "$ctld_pid" 2>/dev/null; then
    scancel --quiet --user=root --partition=ablatetest 2>/dev/null
    for _ in $(seq 1 50); do
      [[ -z "$(squeue -h -p ablatetest 2>/dev/null)" ]] && break
      sleep 0.2
    done
  fi
  local i
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill -TERM "${pids[i]}" 2>/dev/null; done
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    for _ in $(seq 1 50); do kill -0 "${pids[i]}" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "${pids[i]}" 2>/dev/null
  done
  # Anything left that runs from our scratch folder (a worker or trainer of a job slurmd could not
  # finish): found by that unique path, stopped by pid.
  local p cmd
  for p in /proc/[0-9]*; do
    [[ "${p#/proc/}" == "$$" || "${p#/proc/}" == "$BASHPID" ]] && continue
    cmd="$(tr '\0' ' ' 2>/dev/null <"$p/cmdline")" || continue
    [[ "$cmd" == *"$tmp/nodes/"* || "$cmd" == *"$tmp/spool/"* ]] && kill -KILL "${p#/proc/}" 2>/dev/null
  done
  if [[ "${ABLATE_SLURM_KEEP:-0}" == 1 || $rc -ne 0 && $rc -ne 77 ]]; then
    echo "scratch folder kept: $tmp"
  else
    rm -rf "$tmp"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_ports() {  # N free TCP ports on 127.0.0.1
  python3 - "$1" <<'EOF'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}
wait_for() {  # SECONDS DESCRIPTION COMMAND...: polls COMMAND every 0.2 s
  local limit="$1" what="$2"
  shift 2
  local end=$((SECONDS + limit))
  until "$@"; do
    ((SECONDS < end)) || fail "timed out after ${limit}s waiting for $what"
    sleep 0.2
  done
}

mkdir -p "$tmp"/{munge,state,spool,log,coord,nodes,pilot-logs,bundle/bin}
chmod 755 "$tmp/munge"

# ---- munge ----------------------------------------------------------------------------------------
mungekey --create --keyfile="$tmp/munge/munge.key" >/dev/null 2>&1 ||
  dd if=/dev/urandom of="$tmp/munge/munge.key" bs=1024 count=1 status=none
chmod 600 "$tmp/munge/munge.key"
munged --foreground --force --socket="$tmp/munge/socket" --key-file="$tmp/munge/munge.key" \
  --pid-file="$tmp/munge/munged.pid" --seed-file="$tmp/munge/seed" \
  --log-file="$tmp/log/munged.log" >"$tmp/log/munged.out.log" 2>&1 &
pids+=($!)
wait_for 30 "munged's socket" test -S "$tmp/munge/socket"

# ---- slurmctld + slurmd ---------------------------------------------------------------------------
read -r ctld_port slurmd_port < <(free_ports 2)
host="$(hostname -s)"
cpus="$(nproc)"
cat >"$SLURM_CONF" <<EOF
ClusterName=ablatetest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
AuthInfo=socket=$tmp/munge/socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/log/slurmctld.log
SlurmdLogFile=$tmp/log/slurmd.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
ReturnToService=2
KillWait=30
NodeName=ablatenode NodeHostname=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=1000 State=UNKNOWN
PartitionName=ablatetest Nodes=ablatenode Default=YES MaxTime=INFINITE State=UP
EOF
slurmctld -D -i >"$tmp/log/slurmctld.out.log" 2>&1 &
ctld_pid=$!
pids+=("$ctld_pid")
slurmd -D -N ablatenode >"$tmp/log/slurmd.out.log" 2>&1 &
pids+=($!)
node_idle() { sinfo -h -N -n ablatenode -o %t 2>/dev/null | grep -qE '^(idle|mix)'; }
wait_for 90 "the Slurm node to be idle" node_idle
log "slurmctld :$ctld_port and slurmd :$slurmd_port up, node ablatenode idle ($cpus CPUs)"

# ---- the coordinator ------------------------------------------------------------------------------
"$ablated_bin" --data-dir "$tmp/coord" --grpc 127.0.0.1:0 --lease-seconds 20 \
  --heartbeat-seconds 1 >"$tmp/log/ablated.log" 2>&1 &
pids+=($!)
wait_for 60 "ablated's address file" test -s "$tmp/coord/ablated.addr"
coord="$(head -n1 "$tmp/coord/ablated.addr")"
export ABLATE_COORDINATOR="$coord" ABLATE_TOKEN_FILE="$tmp/coord/token"
ablate() { "$cli_bin" "$@"; }
log "ablated on $coord"

# A bundle-shaped folder: bin/ablate-worker (its trainer is found next to the real binary).
ln -s "$worker_bin" "$tmp/bundle/bin/ablate-worker"
ln -s "$train_bin" "$tmp/bundle/bin/ablate-train"

# ---- the helper's checks and dry run --------------------------------------------------------------
common=(--coordinator "$coord" --token-file "$tmp/coord/token" --bundle "$tmp/bundle"
        --nodes 2 --concurrency 2 --gpus-per-node 0 --cpus-per-node 1 --cpu-slots 1
        --time 10 --partition ablatetest --signal-seconds 60 --work-root "$tmp/nodes"
        --log-dir "$tmp/pilot-logs" --sbatch-file "$tmp/pilot.sbatch")
if "$submit" "${common[@]}" --coordinator 'localhost:7070;touch /x' --dry-run >/dev/null 2>&1; then
  fail "the helper accepted a coordinator address with a shell command in it"
fi
if "$submit" "${common[@]}" --time $'10\n#SBATCH --uid=0' --dry-run >/dev/null 2>&1; then
  fail "the helper accepted a line break in --time"
fi
dry="$("$submit" "${common[@]}" --dry-run)"
grep -qx '#SBATCH --array=0-1%2' <<<"$dry" || fail "dry run: no '#SBATCH --array=0-1%2':"$'\n'"$dry"
grep -q '^#SBATCH --gres' <<<"$dry" && fail "dry run: --gres with --gpus-per-node 0"
[[ -e "$tmp/pilot.sbatch" ]] && fail "the dry run wrote the job script"
[[ -z "$(squeue -h)" ]] || fail "the dry run submitted a job"

# ---- submit the pilots ----------------------------------------------------------------------------
out="$("$submit" "${common[@]}")" || fail "ablate-slurm-submit failed: $out"
job="$(tail -n1 <<<"$out")"
[[ "$job" =~ ^[0-9]+$ ]] || fail "no job id from the helper: $out"
log "pilot array $job submitted ($tmp/pilot.sbatch)"

workers_json() { ablate workers --format json 2>/dev/null || echo '[]'; }
two_workers() {
  workers_json | python3 -c '
import json, sys
ws = [w for w in json.load(sys.stdin) if w.get("state") in ("idle", "busy")]
sys.exit(0 if len({w["worker_id"] for w in ws}) == 2 else 1)'
}
wait_for 60 "the two Slurm-started workers to register" two_workers
workers_json | python3 -c '
import json, sys
ids = sorted(w["worker_id"] for w in json.load(sys.stdin))
want = ["slurm-'"$job"'_0", "slurm-'"$job"'_1"]
sys.exit(0 if ids == want else "workers %s, expected %s" % (ids, want))' || fail "unexpected workers"
log "workers slurm-${job}_0 and slurm-${job}_1 registered"

# ---- a sweep --------------------------------------------------------------------------------------
# 4 one-thread trials of ~6 s each on 1-CPU workers; a checkpoint every 25 steps so the preempted
# trial has one before it is preempted; max_attempts: 1, so a preemption that counted would fail it.
cat >"$tmp/sweep.yaml" <<'EOF'
name: slurm-pilot
base:
  model: {seq_len: 32, layers: 1, d_model: 32, heads: 2}
  attention: {kind: fpa}
  optimizer: {kind: adamw, lr: 0.003}
  train: {steps: 1600, tokens_per_step: 256, micro_batch: 8, warmup: 5, eval_every: 400,
          diagnostics_every: 0, checkpoint_every: 25, threads: 1}
grid:
  optimizer.lr: [0.003, 0.002]
seeds: [0, 1]
order: grid
resources: {gpus: 0}
max_attempts: 1
EOF
ablate submit "$tmp/sweep.yaml" >/dev/null || fail "ablate submit failed"
log "sweep slurm-pilot submitted (4 trials)"

# A running trial with a checkpoint, and the array task whose worker runs it.
sql() { ablate query --format csv "$1" | tr -d '\r' | tail -n +2; }
pick() {
  local row
  row="$(sql "SELECT t.id, a.worker_id, t.checkpoint_step FROM trials t JOIN attempts a
               ON a.trial_id = t.id AND a.attempt = t.attempts
              WHERE t.state = 'running' AND a.state = 'running' AND t.checkpoint_step >= 50
              ORDER BY t.id LIMIT 1" 2>/dev/null)" || return 1
  [[ -n "$row" ]] || return 1
  IFS=, read -r victim_trial victim_worker victim_step <<<"$row"
}
wait_for 60 "a running trial with a checkpoint" pick
victim_task="${victim_worker#slurm-"$job"_}"
[[ "$victim_task" =~ ^[01]$ ]] || fail "trial $victim_trial runs on '$victim_worker', not a pilot"
other_worker="slurm-${job}_$((1 - victim_task))"
log "trial $victim_trial runs on $victim_worker (checkpoint at step $victim_step): scancel ${job}_$victim_task"
scancel "${job}_$victim_task" || fail "scancel failed"

# ---- the sweep completes --------------------------------------------------------------------------
finished() { [[ "$(sql "SELECT count(*) FROM trials WHERE state IN ('queued', 'running')")" == 0 ]]; }
wait_for 150 "the sweep to finish" finished
log "sweep finished"
states="$(sql "SELECT state, count(*) FROM trials GROUP BY state")"
[[ "$states" == "succeeded,4" ]] || fail "trial states: $states (expected 4 succeeded)"

attempts="$(sql "SELECT attempt, state, exit_code, worker_id, checkpoint_step, reason FROM attempts
                  WHERE trial_id = $victim_trial ORDER BY attempt")"
log "attempts of trial $victim_trial:"$'\n'"$attempts"
first="$(sed -n 1p <<<"$attempts")"
second="$(sed -n 2p <<<"$attempts")"
[[ "$(wc -l <<<"$attempts")" -eq 2 ]] || fail "expected 2 attempts of trial $victim_trial"
IFS=, read -r a1 s1 e1 w1 c1 r1 <<<"$first"
IFS=, read -r a2 s2 e2 w2 c2 r2 <<<"$second"
[[ "$s1" == lost && "$e1" == 75 && "$w1" == "$victim_worker" ]] ||
  fail "attempt 1: expected lost, exit 75, on $victim_worker: $first"
[[ "$r1" == *"preempted: checkpointed at step $c1"* ]] || fail "attempt 1 reason: $first"
((c1 >= victim_step)) || fail "attempt 1 checkpointed at $c1 < $victim_step"
[[ "$s2" == succeeded && "$w2" == "$other_worker" ]] ||
  fail "attempt 2: expected succeeded on $other_worker: $second"
max_attempts="$(sql "SELECT max_attempts FROM trials WHERE id = $victim_trial")"
[[ "$max_attempts" == 2 ]] || fail "max_attempts of trial $victim_trial is $max_attempts, expected 2"

# The trainers' own records: attempt 1 stopped preempted at step c1, attempt 2 resumed from it.
m1="$tmp/nodes/ablate-${job}_$victim_task/trials/$victim_trial/attempt-1/metrics.jsonl"
m2="$tmp/nodes/ablate-${job}_$((1 - victim_task))/trials/$victim_trial/attempt-2/metrics.jsonl"
[[ -f "$m1" && -f "$m2" ]] || fail "missing $m1 or $m2"
grep -q "\"status\":\"preempted\"" "$m1" || fail "$m1 has no preempted final line"
grep -q "\"resumed_from_step\":$c1," "$m2" || fail "attempt 2 did not resume from step $c1: $(head -c 300 "$m2")"

# The cancelled pilot preempted its worker, which exited on its own after its reports were acked.
plog="$tmp/pilot-logs/ablate-pilot-${job}_$victim_task.out"
wait_for 60 "the cancelled pilot's last line" grep -q "ablate-worker exited with status" "$plog"
grep -q "got SIGTERM: preempting the worker" "$plog" || fail "$plog: no preemption"
grep -q "ablate-worker exited with status 0" "$plog" || fail "$plog: the worker did not exit 0"
grep -q "exiting: nothing left to report" "$plog" || fail "$plog: the worker left reports behind"
log "ok: trial $victim_trial preempted at step $c1 on $victim_worker, resumed and finished on $other_worker"
echo "slurm pilot test passed in $((SECONDS - start_time)) s"
