# Sourced by the scripts that run the whole system from a bundle (gpu_sweeps.sh,
# gpu_sharing_bench.sh): the bundle's folder, and a coordinator on loopback with the CLI aimed at it.
#   source scripts/bundle_cluster.sh
#   root="$(bundle_root BUNDLE OUT)"      # BUNDLE itself when a folder, else unpacked into OUT/bundle
#   start_coordinator                     # needs root, out, clean_env; sets coord, coord_pid, addr,
#                                         # cli (the ablate command), q SQL (CSV), q1 SQL (one value)
# The EXIT trap stops what was started: smi_pid, worker_pid (set them when you start those), the
# coordinator.

bundle_root() {
  local bundle="$1" out="$2" r
  if [[ -d "$bundle" ]]; then
    r="$(cd "$bundle" && pwd)"
  else
    mkdir -p "$out/bundle"
    tar -C "$out/bundle" -xzf "$bundle"
    r="$(find "$out/bundle" -mindepth 1 -maxdepth 1 -type d | head -1)"
  fi
  [[ -x "$r/bin/ablated" ]] || { echo "bundle: $r/bin/ablated missing (not a bundle?)" >&2; return 2; }
  echo "$r"
}

start_coordinator() {
  coord="$out/coordinator"
  mkdir -p "$coord"
  rm -f "$coord/ablated.addr" "$coord/ablated.http"
  "${clean_env[@]}" "$root/bin/ablated" --data-dir "$coord" --grpc 127.0.0.1:0 --http 127.0.0.1:0 \
    >>"$out/ablated.log" 2>&1 &
  coord_pid=$!
  smi_pid="" worker_pid=""
  trap _bundle_cluster_cleanup EXIT
  for _ in $(seq 100); do [[ -s "$coord/ablated.addr" ]] && break; sleep 0.1; done
  [[ -s "$coord/ablated.addr" ]] || { cat "$out/ablated.log" >&2; exit 1; }
  addr="$(cat "$coord/ablated.addr")"
  cli=("${clean_env[@]}" "ABLATE_COORDINATOR=$addr" "ABLATE_TOKEN_FILE=$coord/token" "$root/bin/ablate")
}

_bundle_cluster_cleanup() {
  [[ -n "${smi_pid:-}" ]] && kill "$smi_pid" 2>/dev/null || true
  [[ -n "${worker_pid:-}" ]] && kill "$worker_pid" 2>/dev/null && wait "$worker_pid" 2>/dev/null || true
  [[ -n "${coord_pid:-}" ]] && kill "$coord_pid" 2>/dev/null && wait "$coord_pid" 2>/dev/null || true
}

q() { "${cli[@]}" query --max-rows 1000000 --format csv "$1"; }   # read-only SQL, CSV with header
q1() { q "$1" | tail -1 | tr -d '\r"'; }                           # one value (CSV has CRLF)
