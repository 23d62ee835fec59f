#!/usr/bin/env bash
# Real learning on the GPU: runs the examples/trials/gpu_brown_*.yaml configs (a 25M-parameter
# byte-level GPT on the Brown corpus; fpa and sagebwd, AdamW and spectral rms p in {0, 1/4, 1/2})
# one after another on one GPU and prints the markdown table of docs/learning_gpu.md.
#   worker/trainer/cuda/bench/learning_gpu.sh ABLATE_TRAIN OUT_DIR [CONFIG...]
# The Brown corpus must be in the cache (scripts/fetch_corpora.sh; a machine without network gets
# .cache/corpora/brown.txt copied along and ABLATE_CACHE_DIR pointing at its folder).
set -euo pipefail
train="${1:?usage: learning_gpu.sh ABLATE_TRAIN OUT_DIR [CONFIG...]}"
out="${2:?usage: learning_gpu.sh ABLATE_TRAIN OUT_DIR [CONFIG...]}"
shift 2
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../../.." && pwd)"
configs=("$@")
if [[ "${#configs[@]}" == 0 ]]; then
  configs=("$root"/examples/trials/gpu_brown_fpa_*.yaml "$root"/examples/trials/gpu_brown_sagebwd_*.yaml)
fi
mkdir -p "$out"
for cfg in "${configs[@]}"; do
  name="$(basename "$cfg" .yaml)"
  start_s="$(date +%s.%N)"
  if ! "$train" --config "$cfg" --out "$out/run_$name" > "$out/$name.jsonl" 2> "$out/$name.err"; then
    echo "ablate-train $name failed:" >&2
    tail -5 "$out/$name.err" >&2
  fi
  end_s="$(date +%s.%N)"
  python3 -c 'import sys; print(float(sys.argv[2]) - float(sys.argv[1]))' "$start_s" "$end_s" \
    > "$out/$name.wall"
  rm -rf "$out/run_$name/checkpoints"
  echo "$name done" >&2
done
python3 - "$out" "${configs[@]}" <<'PY'
import json, math, os, statistics, sys
out, configs = sys.argv[1], sys.argv[2:]
rows, entropy, dev = [], None, ""
for cfg in configs:
    name = os.path.basename(cfg)[:-5]
    lines = [json.loads(l) for l in open(f"{out}/{name}.jsonl") if l.strip()]
    start = next((l for l in lines if l["type"] == "start"), {})
    final = next((l for l in lines if l["type"] == "final"), {})
    entropy = start.get("unigram_entropy", entropy)
    dev = start.get("device", dev)
    evals = [l["val_loss"] for l in lines if l["type"] == "eval"]
    tps = [l["tokens_per_s"] for l in lines if l["type"] == "step" and l["step"] > 5]
    wall = float(open(f"{out}/{name}.wall").read())
    att = "sagebwd" if "_sagebwd_" in name else "fpa"
    opt = name.split(f"_{att}_")[1].replace("spectral_p", "spectral rms p=")
    val = final.get("final_val_loss")
    rows.append((att, opt, final.get("status", "failed"), evals, val,
                 statistics.median(tps) if tps else float("nan"), final.get("elapsed_s", wall), wall,
                 start.get("params")))
print(f"GPU: {dev}. Unigram entropy of the training split: {entropy:.4f} nats/token "
      f"({entropy / math.log(2):.3f} bits/byte).")
print()
print("| attention | optimizer | status | val loss at steps 100/200/300/400 | final val loss | bits/byte | below unigram | tokens/s | train s | wall s |")
print("|---|---|---|---|---:|---:|---:|---:|---:|---:|")
for att, opt, status, evals, val, tps, el, wall, n in rows:
    ev = " / ".join(f"{v:.3f}" for v in evals)
    v = f"{val:.4f}" if val is not None else "-"
    bpb = f"{val / math.log(2):.3f}" if val is not None else "-"
    below = f"{entropy - val:.3f}" if val is not None else "-"
    print(f"| {att} | {opt} | {status} | {ev} | {v} | {bpb} | {below} | {tps:,.0f} | {el:.0f} | {wall:.0f} |")
print()
print(f"Parameters: {rows[0][8]}")
PY
