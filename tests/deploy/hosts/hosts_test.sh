#!/usr/bin/env bash
# Several hosts as network namespaces: the coordinator on one, a worker on each of two others, a
# sweep across them, and one worker host cut off mid-trial.
#
# Topology (created fresh, private to this run, removed on every exit path):
#   <p>-coord  eth0 10.77.0.1/24 --+
#   <p>-host-a eth0 10.77.0.2/24 --+-- br0 in <p>-switch (veth pairs)
#   <p>-host-b eth0 10.77.0.3/24 --+
# The addresses exist only inside the namespaces. ablated listens on 10.77.0.1 only (gRPC :7070,
# HTTP :7071); each worker gets its own copy of the token file (a real host gets it by scp or a
# secret store) and connects over the "network". Every process is started with `ip netns exec`.
#
# Scenario: a sweep of 6 CPU trials (~1000 steps each), --lease-seconds 3 --heartbeat-seconds 1,
# one CPU slot per worker. Once both hosts have finished a trial, the next attempt that starts on
# host-a has its link cut (`ip link set eth0 down` inside host-a). The sweep must still complete,
# and the CLI (run in the coordinator's namespace) must show: every trial succeeded; both hosts ran
# trials; the cut trial has an attempt `lost` on host-a and a later one `succeeded` on host-b.
# Also: the CLI at 127.0.0.1 inside the coordinator's host is refused (ablated listens on the
# chosen interface only), and host-b reads /api/workers over HTTP with the token.
#
# --tls: the same over TLS with a server certificate for IP:10.77.0.1 and mutual TLS for workers
# (ablated --tls-cert/--tls-key/--tls-client-ca, workers --tls-ca/--tls-cert/--tls-key, the CLI
# --tls-ca), certificates made with openssl; a plaintext CLI must be refused.
#
# Usage: hosts_test.sh [--tls] ABLATED ABLATE_WORKER ABLATE_TRAIN ABLATE_CLI
# Exit 77 (skip) when not root or `ip netns` does not work. ABLATE_HOSTS_TEST_KEEP=1 keeps the
# scratch folder (logs, databases).
set -euo pipefail

tls=0
if [[ "${1:-}" == --tls ]]; then
  tls=1
  shift
fi
usage="usage: hosts_test.sh [--tls] ABLATED ABLATE_WORKER ABLATE_TRAIN ABLATE_CLI"
ablated="${1:?$usage}" worker="${2:?$usage}" trainer="${3:?$usage}" cli_bin="${4:?$usage}"

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
log() { echo "[$(date +%H:%M:%S)] $*"; }

[[ "$(id -u)" -eq 0 ]] || { echo "skip: needs root (network namespaces)"; exit 77; }
command -v ip >/dev/null || { echo "skip: no ip (iproute2)"; exit 77; }
if ((tls)); then command -v openssl >/dev/null || { echo "skip: no openssl"; exit 77; }; fi
for b in "$ablated" "$worker" "$trainer" "$cli_bin"; do [[ -x "$b" ]] || fail "$b is not built"; done

prefix="ablh$$"
ns_sw="$prefix-switch" ns_c="$prefix-coord" ns_a="$prefix-host-a" ns_b="$prefix-host-b"
ip netns add "$ns_sw" 2>/dev/null || { echo "skip: ip netns add does not work here"; exit 77; }

tmp="$(mktemp -d /tmp/ablate_hosts_test.XXXXXX)"
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  disown -a 2>/dev/null || true # no "Killed" job notices for what we kill here
  # Every process in the namespaces: daemons, trainers (their own process groups), CLIs.
  for ns in "$ns_c" "$ns_a" "$ns_b" "$ns_sw"; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
  done
  for ns in "$ns_c" "$ns_a" "$ns_b" "$ns_sw"; do ip netns del "$ns" 2>/dev/null || true; done
  if ((rc != 0)) || [[ "${ABLATE_HOSTS_TEST_KEEP:-0}" == 1 ]]; then
    for f in "$tmp"/*.log; do [[ -f "$f" ]] && { echo "--- $f"; tail -n 25 "$f"; }; done
  fi
  if [[ "${ABLATE_HOSTS_TEST_KEEP:-0}" == 1 ]]; then echo "kept $tmp"; else rm -rf -- "$tmp"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
start=$SECONDS

# --- the network ---------------------------------------------------------------------------------
ip -n "$ns_sw" link add br0 type bridge
ip -n "$ns_sw" link set br0 up
ip -n "$ns_sw" link set lo up
i=1
for ns in "$ns_c" "$ns_a" "$ns_b"; do
  ip netns add "$ns"
  ip -n "$ns_sw" link add "port$i" type veth peer name eth0 netns "$ns"
  ip -n "$ns_sw" link set "port$i" master br0 up
  ip -n "$ns" addr add "10.77.0.$i/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  i=$((i + 1))
done
# A new bridge has STP off: its ports forward at once. The workers' registration below is the
# connectivity check.
log "network: coord 10.77.0.1, host-a 10.77.0.2, host-b 10.77.0.3 over a bridge"

# --- certificates (--tls) ------------------------------------------------------------------------
coord_tls=() worker_a_tls=() worker_b_tls=() cli_tls=()
if ((tls)); then
  (
    cd "$tmp"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 1 -subj /CN=ablate-test-ca
    openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=coord
    printf 'subjectAltName=IP:10.77.0.1\n' >server.ext
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem \
      -days 1 -extfile server.ext
    for h in host-a host-b; do
      openssl req -newkey rsa:2048 -nodes -keyout "$h.key" -out "$h.csr" -subj "/CN=$h"
      openssl x509 -req -in "$h.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -out "$h.pem" -days 1
    done
  ) >"$tmp/openssl.log" 2>&1 || fail "openssl: $(tail -n 5 "$tmp/openssl.log")"
  coord_tls=(--tls-cert "$tmp/server.pem" --tls-key "$tmp/server.key" --tls-client-ca "$tmp/ca.pem")
  worker_a_tls=(--tls-ca "$tmp/ca.pem" --tls-cert "$tmp/host-a.pem" --tls-key "$tmp/host-a.key")
  worker_b_tls=(--tls-ca "$tmp/ca.pem" --tls-cert "$tmp/host-b.pem" --tls-key "$tmp/host-b.key")
  cli_tls=(--tls-ca "$tmp/ca.pem")
fi

# --- the coordinator host ------------------------------------------------------------------------
mkdir -p "$tmp/coord" "$tmp/host-a" "$tmp/host-b"
ip netns exec "$ns_c" "$ablated" --data-dir "$tmp/coord" --grpc 10.77.0.1:7070 \
  --http 10.77.0.1:7071 --lease-seconds 3 --heartbeat-seconds 1 "${coord_tls[@]}" \
  >"$tmp/ablated.log" 2>&1 &
ablated_pid=$!
for _ in $(seq 100); do
  [[ -s "$tmp/coord/ablated.addr" && -s "$tmp/coord/ablated.http" ]] && break
  kill -0 "$ablated_pid" 2>/dev/null || fail "ablated exited"
  sleep 0.1
done
[[ -s "$tmp/coord/ablated.http" ]] || fail "ablated did not start"

cli() { # the CLI, run on the coordinator's host
  ip netns exec "$ns_c" "$cli_bin" --coordinator 10.77.0.1:7070 --token-file "$tmp/coord/token" \
    --timeout 10 "${cli_tls[@]}" "$@"
}
sql() { cli query "$1" --format csv | tail -n +2 | tr -d '\r'; }

# Listening on the chosen interface only: loopback on the same host is refused.
rc=0
ip netns exec "$ns_c" "$cli_bin" --coordinator 127.0.0.1:7070 --token-file "$tmp/coord/token" \
  --timeout 3 "${cli_tls[@]}" workers >"$tmp/loopback.out" 2>&1 || rc=$?
((rc == 4)) || fail "the CLI at 127.0.0.1:7070 got exit $rc, expected 4 (unavailable): $(cat "$tmp/loopback.out")"
if ((tls)); then
  rc=0
  ip netns exec "$ns_c" "$cli_bin" --coordinator 10.77.0.1:7070 --token-file "$tmp/coord/token" \
    --timeout 3 workers >"$tmp/plaintext.out" 2>&1 || rc=$?
  ((rc != 0)) || fail "a plaintext CLI was served by the TLS coordinator"
fi
log "ablated on 10.77.0.1 only$( ((tls)) && echo ", TLS + mutual TLS for workers")"

# --- the worker hosts: each with its own copy of the token ---------------------------------------
for h in host-a host-b; do
  install -m 0600 "$tmp/coord/token" "$tmp/$h/token"
done
ip netns exec "$ns_a" "$worker" --coordinator 10.77.0.1:7070 --token-file "$tmp/host-a/token" \
  --worker-id host-a --gpus none --cpu-slots 1 --work-dir "$tmp/host-a/work" --trainer "$trainer" \
  "${worker_a_tls[@]}" >"$tmp/host-a.log" 2>&1 &
ip netns exec "$ns_b" "$worker" --coordinator 10.77.0.1:7070 --token-file "$tmp/host-b/token" \
  --worker-id host-b --gpus none --cpu-slots 1 --work-dir "$tmp/host-b/work" --trainer "$trainer" \
  "${worker_b_tls[@]}" >"$tmp/host-b.log" 2>&1 &

for _ in $(seq 100); do
  [[ "$(sql "SELECT count(*) FROM workers WHERE state != 'lost'")" == 2 ]] && break
  sleep 0.2
done
[[ "$(sql "SELECT count(*) FROM workers WHERE state != 'lost'")" == 2 ]] ||
  fail "the workers did not register: $(cli workers 2>&1)"
log "host-a and host-b registered over 10.77.0.0/24"

# HTTP from another host, with the token.
if command -v python3 >/dev/null; then
  ip netns exec "$ns_b" python3 - "$tmp/host-b/token" >"$tmp/http.out" 2>&1 <<'EOF' ||
import json, sys, urllib.request
token = open(sys.argv[1]).read().strip()
req = urllib.request.Request("http://10.77.0.1:7071/api/workers",
                             headers={"Authorization": "Bearer " + token})
body = json.load(urllib.request.urlopen(req, timeout=10))
ids = sorted(w.get("id") or w.get("worker_id") for w in (body if isinstance(body, list) else body["workers"]))
assert ids == ["host-a", "host-b"], ids
try:
    urllib.request.urlopen("http://10.77.0.1:7071/api/workers", timeout=10)
    raise SystemExit("served without the token")
except urllib.error.HTTPError as e:
    assert e.code == 401, e.code
print("ok")
EOF
    fail "HTTP /api/workers from host-b: $(cat "$tmp/http.out")"
  log "HTTP: host-b reads /api/workers (both workers) with the token; 401 without"
fi

# --- the sweep -----------------------------------------------------------------------------------
cat >"$tmp/hosts.yaml" <<'EOF'
name: hosts
base:
  data: {corpus: brown, val_fraction: 0.05, eval_batches: 2}
  model: {seq_len: 32, layers: 1, d_model: 32, heads: 2}
  optimizer: {lr: 0.01, lr_vector: 0.003}
  train: {steps: 1000, tokens_per_step: 256, micro_batch: 8, warmup: 10, eval_every: 250,
          diagnostics_every: 0, checkpoint_every: 250, threads: 1}
  device: cpu
seeds: [0, 1, 2, 3, 4, 5]
order: grid
resources: {gpus: 0}
max_attempts: 3
EOF
cli submit "$tmp/hosts.yaml" >"$tmp/submit.out" 2>&1 || fail "submit: $(cat "$tmp/submit.out")"
log "sweep 'hosts' submitted: 6 trials"

# Wait until each host has finished a trial, then for the next attempt to start on host-a.
seen=""
for _ in $(seq 600); do
  done_a="$(sql "SELECT count(*) FROM attempts WHERE worker_id = 'host-a' AND state = 'succeeded'")"
  done_b="$(sql "SELECT count(*) FROM attempts WHERE worker_id = 'host-b' AND state = 'succeeded'")"
  if ((done_a >= 1 && done_b >= 1)); then
    seen="$(sql "SELECT trial_id || ':' || attempt FROM attempts WHERE worker_id = 'host-a' AND state = 'running'")"
    [[ -n "$seen" ]] && break
  fi
  sleep 0.2
done
[[ -n "$seen" ]] || fail "host-a never started a second trial: $(cli status hosts 2>&1)"
cut_trial="${seen%%:*}" cut_attempt="${seen##*:}"
ip -n "$ns_a" link set eth0 down
log "both hosts finished a trial; cut host-a's link while it runs trial $cut_trial attempt $cut_attempt"

# In the background + wait, so that a signal to this script is handled at once.
timeout 150 ip netns exec "$ns_c" "$cli_bin" --coordinator 10.77.0.1:7070 \
  --token-file "$tmp/coord/token" "${cli_tls[@]}" watch hosts --interval 1 >"$tmp/watch.log" 2>&1 &
rc=0
wait $! || rc=$?
((rc == 0)) || fail "the sweep did not complete after the cut (watch exit $rc): $(tail -n 3 "$tmp/watch.log")"
log "sweep complete ($((SECONDS - start)) s so far)"

# --- what the coordinator recorded, through the CLI ----------------------------------------------
cli query "SELECT trial_id, attempt, worker_id, state, reason FROM attempts ORDER BY trial_id, attempt" \
  >"$tmp/attempts.out" || fail "query attempts failed"
sed 's/^/    /' "$tmp/attempts.out"
[[ "$(sql "SELECT count(*) FROM trials WHERE state = 'succeeded'")" == 6 ]] ||
  fail "not every trial succeeded: $(cli status hosts 2>&1)"
[[ "$(sql "SELECT count(*) FROM trials t WHERE (SELECT count(*) FROM attempts a WHERE a.trial_id = t.id AND a.state = 'succeeded') != 1")" == 0 ]] ||
  fail "a trial has no or several succeeded attempts"
for h in host-a host-b; do
  n="$(sql "SELECT count(*) FROM attempts WHERE worker_id = '$h' AND state = 'succeeded'")"
  ((n >= 1)) || fail "$h ran no trial to success"
done
state="$(sql "SELECT state FROM attempts WHERE trial_id = $cut_trial AND attempt = $cut_attempt")"
[[ "$state" == lost ]] || fail "the cut attempt ($cut_trial/$cut_attempt on host-a) is '$state', expected lost"
later="$(sql "SELECT count(*) FROM attempts WHERE trial_id = $cut_trial AND attempt > $cut_attempt AND worker_id = 'host-b' AND state = 'succeeded'")"
((later == 1)) || fail "trial $cut_trial was not completed on host-b after the cut"
after_cut="$(sql "SELECT count(*) FROM attempts WHERE worker_id = 'host-a' AND state = 'succeeded' AND started_at > (SELECT started_at FROM attempts WHERE trial_id = $cut_trial AND attempt = $cut_attempt)")"
((after_cut == 0)) || fail "host-a succeeded trials after its link was cut"
cli workers >"$tmp/workers.out" 2>&1 || true
sed 's/^/    /' "$tmp/workers.out"
log "trial $cut_trial: attempt $cut_attempt lost on host-a, completed on host-b; both hosts ran trials"
log "PASS ($((SECONDS - start)) s)"
