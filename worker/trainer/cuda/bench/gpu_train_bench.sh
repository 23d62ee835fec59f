#!/usr/bin/env bash
# GPU training speed: ablate-train (device: cuda; fpa + AdamW and sagebwd + AdamW) against the
# PyTorch reference model of the same shape (torch_gpt_ref.py: torch.compile, bf16 autocast, SDPA,
# fused AdamW), measured in one run on one GPU. Shape: GPT-2 small (12 layers, d_model 768, 12 heads,
# T 1024, vocab 50304 as padded bytes), micro-batch 16, one micro-batch per step.
#   worker/trainer/cuda/bench/gpu_train_bench.sh ABLATE_TRAIN OUT_DIR [STEPS]
# Prints a markdown table (median tokens/s over the steps after the first 5, MFU at the GPU's
# dense bf16 peak) and leaves the logs in OUT_DIR.
set -euo pipefail
train="${1:?usage: gpu_train_bench.sh ABLATE_TRAIN OUT_DIR [STEPS]}"
out="${2:?usage: gpu_train_bench.sh ABLATE_TRAIN OUT_DIR [STEPS]}"
steps="${3:-30}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/bench_config.sh"
mkdir -p "$out"

# A byte corpus (vocab padded to 50304): 8 MB of seeded toy sentences.
python3 "$here/toy_corpus.py" "$out/corpus.txt"

run_ablate() {  # name attention
  local name="$1" att="$2"
  bench_trial_yaml "$out/corpus.txt" "$att" "$steps" > "$out/$name.yaml"
  "$train" --config "$out/$name.yaml" --out "$out/run_$name" > "$out/$name.jsonl" 2> "$out/$name.err" || {
    echo "ablate-train $name failed:"; cat "$out/$name.err"; return 1; }
  rm -rf "$out/run_$name/checkpoints"
}
run_ablate fpa_adamw fpa
run_ablate sagebwd_adamw sagebwd
python3 "$here/torch_gpt_ref.py" --steps "$steps" > "$out/torch.json" 2> "$out/torch.err" || {
  echo "torch reference failed:"; tail -20 "$out/torch.err"; }

python3 - "$out" <<'PY'
import json, os, statistics, sys
out = sys.argv[1]
rows = []
ref = None
if os.path.exists(f"{out}/torch.json") and os.path.getsize(f"{out}/torch.json") > 0:
    t = json.loads(open(f"{out}/torch.json").read().strip().splitlines()[-1])
    ref = t["tokens_per_s"]
    rows.append((t["impl"] + " (fused AdamW, SDPA)", t["tokens_per_s"], t["mfu"], t["step_ms"]))
dev = ""
for name in ("fpa_adamw", "sagebwd_adamw"):
    lines = [json.loads(l) for l in open(f"{out}/{name}.jsonl")]
    start = next(l for l in lines if l["type"] == "start")
    dev = start.get("device", "")
    steps = [l for l in lines if l["type"] == "step" and l["step"] > 5]
    tps = statistics.median(l["tokens_per_s"] for l in steps)
    mfu = statistics.median(l["mfu"] for l in steps)
    ms = 1e3 * statistics.median(l["step_time_s"] for l in steps)
    rows.append((f"ablate-train {name.replace('_', ' + ')} (optimizer on {start.get('optimizer_device')})", tps, mfu, ms))
print(f"GPU: {dev}; GPT-2 small shape (L12, C768, H12, T1024, V50304), batch 16 x 1024 tokens/step")
print("| implementation | tokens/s | MFU | step ms | vs PyTorch |")
print("|---|---|---|---|---|")
for n, tps, mfu, ms in rows:
    rel = f"{tps / ref:.2f}x" if ref else "n/a"
    print(f"| {n} | {tps:,.0f} | {100 * mfu:.1f}% | {ms:.1f} | {rel} |")
PY
