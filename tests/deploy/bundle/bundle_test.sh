#!/usr/bin/env bash
# The relocatable bundle on a machine that has nothing but glibc.
#
# Builds the tarball (deploy/bundle.sh --tar) from BUILD_DIR, checks its contents, and unpacks it
# into a minimal chroot holding only glibc's files (the ELF interpreter, libc, libm, libpthread,
# libdl, librt and whatever ldd says libc itself needs), a fresh /proc, /dev/null, /dev/zero and
# /dev/urandom (mknod on a tmpfs) and an empty /tmp. The bundle lands in an arbitrary folder
# (/srv/apps/<name>/), with a symlink /usr/local/bin/ablate to its CLI. There, every command runs
# under `env -i` (no LD_LIBRARY_PATH, no PATH, no HOME):
#   - the ELF interpreter lists each program's libraries: all from the bundle or glibc, none missing;
#   - ablate-train --print-config, and a tiny CPU trial on the built-in corpus the bundle carries;
#   - ablated (gRPC and HTTP on loopback) + ablate-worker + the CLI (through the symlink) complete a
#     2-trial sweep; the worker drains and ablated stops on SIGTERM, both with exit status 0.
# The chroot part runs in its own mount, network and PID namespaces (unshare): its mounts and every
# process it started vanish with it on any exit, even a SIGKILL of this script; a trap also unmounts
# and kills explicitly.
#
# Usage: bundle_test.sh SOURCE_DIR BUILD_DIR. Exit 77 (skip) when not root or without unshare.
# ABLATE_BUNDLE_TEST_KEEP=1 keeps the scratch folder.
set -euo pipefail

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
log() { echo "[$(date +%H:%M:%S)] $*"; }

# --- inside the namespaces -----------------------------------------------------------------------
if [[ "${1:-}" == --inside ]]; then
  root="$2" app="$3" tmp="$4"
  pids=()
  cleanup_inside() {
    local rc=$?
    disown -a 2>/dev/null || true
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
    umount -l "$root/dev" 2>/dev/null || true
    umount -l "$root/proc" 2>/dev/null || true
    exit "$rc"
  }
  trap cleanup_inside EXIT
  # This shell is the PID namespace's first process: without a handler it would ignore SIGTERM.
  trap 'exit 143' INT TERM
  mount -t proc proc "$root/proc"
  mount -t tmpfs -o mode=0755,size=64k tmpfs "$root/dev"
  mknod -m 0666 "$root/dev/null" c 1 3
  mknod -m 0666 "$root/dev/zero" c 1 5
  mknod -m 0444 "$root/dev/urandom" c 1 9
  ip link set lo up

  chroot_bin="$(command -v chroot)"
  in_root() { env -i "$chroot_bin" "$root" "$@"; }
  cli() { in_root /usr/local/bin/ablate --coordinator 127.0.0.1:7070 \
    --token-file /var/lib/ablate/token --timeout 10 "$@"; }

  # 1. Every library a program loads comes from the bundle or glibc.
  interp="$(cat "$tmp/interp")"
  for p in ablated ablate-worker ablate-train ablate; do
    listing="$(in_root "$interp" --list "$app/bin/$p" 2>&1)" || fail "$p does not load: $listing"
    [[ "$listing" != *"not found"* ]] || fail "$p: missing libraries: $listing"
    outside="$(awk '$2 == "=>" {print $3}' <<<"$listing" |
      grep -v -e "^$app/lib/" -e "^$app/bin/\.\./lib/" | grep -vxF -f "$tmp/glibc_files" || true)"
    [[ -z "$outside" ]] || fail "$p loads libraries from outside the bundle: $outside"
  done
  log "libraries: every program resolves only to the bundle and glibc"

  # 2. The trainer alone.
  in_root "$app/bin/ablate-train" --print-config --config /work/empty.yaml >"$tmp/print_config.out" ||
    fail "ablate-train --print-config failed"
  grep -q '"config_hash"' "$tmp/print_config.out" || fail "--print-config printed no config_hash"
  in_root "$app/bin/ablate-train" --config /work/tiny.yaml --out /work/trial >"$tmp/trial.out" \
    2>"$tmp/trial.err" || fail "the tiny trial failed: $(tail -n 5 "$tmp/trial.err")"
  grep -q '"type":"start"' "$tmp/trial.out" || fail "the trial printed no start line"
  grep -q '"status":"ok".*"type":"final"' "$tmp/trial.out" ||
    fail "the trial did not end ok: $(tail -n 2 "$tmp/trial.out")"
  log "ablate-train: --print-config and a 20-step trial on the bundled brown corpus: ok"

  # 3. Coordinator, worker and CLI.
  # Started as simple commands, not through in_root, so that $! is the program itself (env and
  # chroot exec it) and not a subshell.
  env -i "$chroot_bin" "$root" "$app/bin/ablated" --data-dir /var/lib/ablate --grpc 127.0.0.1:7070 \
    --http 127.0.0.1:7071 --lease-seconds 10 --heartbeat-seconds 1 >"$tmp/ablated.log" 2>&1 &
  ablated_pid=$!
  pids+=("$ablated_pid")
  for _ in $(seq 100); do
    [[ -s "$root/var/lib/ablate/ablated.addr" ]] && break
    kill -0 "$ablated_pid" 2>/dev/null || fail "ablated exited: $(cat "$tmp/ablated.log")"
    sleep 0.1
  done
  [[ -s "$root/var/lib/ablate/ablated.addr" ]] || fail "ablated did not start: $(cat "$tmp/ablated.log")"
  env -i "$chroot_bin" "$root" "$app/bin/ablate-worker" --coordinator 127.0.0.1:7070 \
    --token-file /var/lib/ablate/token --gpus none --cpu-slots 2 --work-dir /work/worker \
    --keepalive-ms 0 >"$tmp/worker.log" 2>&1 &
  worker_pid=$!
  pids+=("$worker_pid")
  # The bundled dashboard, when the source had one, is what ablated serves.
  if [[ -f "$root$app/share/ablate/web/index.html" ]]; then
    grep -q "web dir $app/bin/../share/ablate/web" "$tmp/ablated.log" ||
      fail "ablated does not serve the bundled dashboard: $(cat "$tmp/ablated.log")"
  fi
  cli submit /work/sweep.yaml >"$tmp/submit.out" 2>&1 || fail "submit: $(cat "$tmp/submit.out")"
  timeout 90 env -i "$chroot_bin" "$root" /usr/local/bin/ablate --coordinator 127.0.0.1:7070 \
    --token-file /var/lib/ablate/token watch chroot-sweep --interval 0.5 >"$tmp/watch.out" 2>&1 &
  rc=0
  wait $! || rc=$? # in the background + wait: a SIGTERM is handled at once
  ((rc == 0)) ||
    fail "the sweep did not succeed (watch exit $rc): $(tail -n 3 "$tmp/watch.out"); worker: $(tail -n 5 "$tmp/worker.log")"
  cli status chroot-sweep --format json >"$tmp/status.json" || fail "status failed"
  [[ "$(grep -c '"trial_id"' "$tmp/status.json")" == 2 &&
    "$(grep -c '"state": *"succeeded"' "$tmp/status.json")" == 2 ]] ||
    fail "not 2 trials succeeded: $(cat "$tmp/status.json")"
  cli results chroot-sweep --by seed >"$tmp/results.out" || fail "results failed"
  cli workers >"$tmp/workers.out" || fail "workers failed"
  log "sweep: 2 trials succeeded on the chroot's ablated + ablate-worker"
  sed 's/^/    /' "$tmp/results.out"

  kill -TERM "$worker_pid"
  rc=0
  timeout 20 tail --pid="$worker_pid" -f /dev/null || fail "the worker did not drain in 20 s"
  wait "$worker_pid" || rc=$?
  ((rc == 0)) || fail "ablate-worker exited $rc on SIGTERM: $(tail -n 5 "$tmp/worker.log")"
  kill -TERM "$ablated_pid"
  timeout 20 tail --pid="$ablated_pid" -f /dev/null || fail "ablated did not stop in 20 s"
  wait "$ablated_pid" || rc=$?
  ((rc == 0)) || fail "ablated exited $rc on SIGTERM: $(tail -n 5 "$tmp/ablated.log")"
  pids=()
  log "SIGTERM: the worker drained and ablated stopped, both with status 0"
  exit 0
fi

# --- outside: build the tarball and the chroot ---------------------------------------------------
src="${1:?usage: bundle_test.sh SOURCE_DIR BUILD_DIR}"
build="${2:?usage: bundle_test.sh SOURCE_DIR BUILD_DIR}"
src="$(cd "$src" && pwd)"
build="$(cd "$build" && pwd)"
[[ "$(id -u)" -eq 0 ]] || { echo "skip: needs root (chroot, mount, mknod)"; exit 77; }
command -v unshare >/dev/null && command -v ip >/dev/null || { echo "skip: needs unshare and ip"; exit 77; }
unshare --mount --net --pid --fork true 2>/dev/null || { echo "skip: unshare does not work here"; exit 77; }
for p in bin/ablated bin/ablate-worker bin/ablate-train bin/ablate; do
  [[ -x "$build/$p" ]] || fail "$build/$p is not built"
done

tmp="$(mktemp -d /tmp/ablate_bundle_test.XXXXXX)"
cleanup() {
  local rc=$?
  if [[ "${ABLATE_BUNDLE_TEST_KEEP:-0}" == 1 || $rc -ne 0 ]]; then
    for f in "$tmp"/*.log; do [[ -f "$f" ]] && { echo "--- $f"; tail -n 20 "$f"; }; done
  fi
  if [[ "${ABLATE_BUNDLE_TEST_KEEP:-0}" == 1 ]]; then
    echo "kept $tmp"
  else
    rm -rf -- "$tmp"
  fi
  exit "$rc"
}
trap cleanup EXIT

start=$SECONDS
tarball="$(bash "$src/deploy/bundle.sh" --tar "$build" "$tmp/dist" 2>"$tmp/bundle.log" | tail -n 1)" ||
  fail "deploy/bundle.sh failed: $(cat "$tmp/bundle.log")"
name="$(basename "$tarball" .tar.gz)"
[[ "$name" =~ ^ablate-[0-9A-Za-z._+-]+-linux-[a-z0-9_]+$ ]] || fail "unexpected tarball name $name"
log "bundle: $(tail -n 1 "$tmp/bundle.log") ($((SECONDS - start)) s)"

# Contents: the programs, the C++ runtime, the documents; never glibc or the driver.
tar -tzf "$tarball" >"$tmp/contents"
for want in bin/ablated bin/ablate-worker bin/ablate-train bin/ablate lib/libstdc++.so.6 \
  lib/libgcc_s.so.1 lib/libgrpc++.so README.md NOTICE BUILDINFO licenses/ \
  systemd/ablated.service systemd/ablate-worker@.service .cache/corpora/brown.txt; do
  grep -q "^$name/$want" "$tmp/contents" || fail "the tarball has no $want"
done
if grep -E "^$name/lib/(libc\.so|libm\.so|ld-linux|libpthread|libdl\.so|librt\.so|libcuda\.so)" "$tmp/contents"; then
  fail "the tarball carries glibc or driver libraries"
fi

root="$tmp/root"
app="/srv/apps/$name"
mkdir -p "$root/srv/apps" "$root/proc" "$root/dev" "$root/tmp" "$root/var/lib/ablate" "$root/work" \
  "$root/usr/local/bin"
chmod 1777 "$root/tmp"
tar -C "$root/srv/apps" -xzf "$tarball"
ln -s "../../../srv/apps/$name/bin/ablate" "$root/usr/local/bin/ablate"

# glibc: the interpreter the programs name, then libc and its siblings from the folder ldd finds
# libc in, then what ldd says libc itself needs.
interp="$(readelf -l "$root$app/bin/ablated" | sed -n 's/.*Requesting program interpreter: \(.*\)]/\1/p')"
[[ -n "$interp" ]] || fail "cannot read the ELF interpreter of ablated"
libc="$(ldd "$root$app/bin/ablated" | awk '$1 == "libc.so.6" {print $3}')"
[[ -n "$libc" ]] || fail "ldd finds no libc.so.6 for ablated"
libdir="$(dirname "$libc")"
files=("$interp")
for l in libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1; do
  [[ -e "$libdir/$l" ]] && files+=("$libdir/$l")
done
while read -r path; do files+=("$path"); done < <(ldd "$libc" | awk '/=> \// {print $3} /^\t\// {print $1}')
: >"$tmp/glibc_files"
for f in "${files[@]}"; do
  mkdir -p "$root$(dirname "$f")"
  cp -L "$f" "$root$f"
  echo "$f" >>"$tmp/glibc_files"
done
echo "$interp" >"$tmp/interp"
# A CUDA build leaves the CUDA runtime libraries to the host (a GPU node has the driver and the CUDA
# runtime, README "Bundle"): give the chroot exactly those, at the paths this host has them, as the
# GPU node's CUDA install. No driver (libcuda): the programs must still start, and train on the CPU.
cuda_re='^lib(cudart|cublas|cublasLt|nccl|cusolver|cusparse|nvJitLink|curand|cufft)\.so'
declare -A cuda_libs=()
queue=("$root$app"/bin/*)
while ((${#queue[@]})); do
  obj="${queue[0]}"
  queue=("${queue[@]:1}")
  while read -r soname path; do
    [[ "$soname" =~ $cuda_re && -n "$path" && -z "${cuda_libs[$path]:-}" ]] || continue
    cuda_libs[$path]=1
    queue+=("$path")
  done < <(ldd "$obj" 2>/dev/null | awk '/=> \// {print $1, $3}')
done
for f in "${!cuda_libs[@]}"; do
  mkdir -p "$root$(dirname "$f")"
  cp -L "$f" "$root$f"
  echo "$f" >>"$tmp/glibc_files"
done
((${#cuda_libs[@]} == 0)) || log "chroot: plus the host's CUDA runtime ($(printf '%s\n' "${!cuda_libs[@]}" | xargs -n1 basename | sort | tr '\n' ' '))"
log "chroot: glibc ($(sort -u "$tmp/glibc_files" | xargs -n1 basename | tr '\n' ' ')), bundle in $app"

: >"$root/work/empty.yaml"
cat >"$root/work/tiny.yaml" <<'EOF'
data: {corpus: brown, val_fraction: 0.05, eval_batches: 2}
model: {seq_len: 32, layers: 1, d_model: 32, heads: 2}
optimizer: {lr: 0.01, lr_vector: 0.003}
train: {steps: 20, tokens_per_step: 256, micro_batch: 8, warmup: 2, eval_every: 10,
        diagnostics_every: 10, checkpoint_every: 10, threads: 1}
device: cpu
EOF
cat >"$root/work/sweep.yaml" <<'EOF'
name: chroot-sweep
base:
  data: {corpus: brown, val_fraction: 0.05, eval_batches: 2}
  model: {seq_len: 32, layers: 1, d_model: 32, heads: 2}
  optimizer: {lr: 0.01, lr_vector: 0.003}
  train: {steps: 40, tokens_per_step: 256, micro_batch: 8, warmup: 2, eval_every: 20,
          diagnostics_every: 20, checkpoint_every: 20, threads: 1}
  device: cpu
seeds: [0, 1]
resources: {gpus: 0}
max_attempts: 1
EOF

# In the background + wait, so that a signal to this script is handled at once. unshare ignores
# SIGTERM while it waits, so the signal goes to the inner shell (its child), which cleans up and
# exits; should unshare die instead, --kill-child kills the inner shell and the kernel every other
# process of the namespace. The scratch folder goes only after that.
unshare --mount --net --pid --fork --kill-child --propagation private \
  bash "${BASH_SOURCE[0]}" --inside "$root" "$app" "$tmp" &
inner=$!
stop_inner() {
  local child
  for child in $(ps -o pid= --ppid "$inner" 2>/dev/null); do kill -TERM "$child" 2>/dev/null || true; done
  wait "$inner" 2>/dev/null || true
  exit 143
}
trap stop_inner INT TERM
rc=0
wait "$inner" || rc=$?
((rc == 0)) || exit "$rc"
log "PASS ($((SECONDS - start)) s)"
