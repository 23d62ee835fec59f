#!/usr/bin/env bash
# Data parallel speed: ablate-train (device: cuda, fpa + AdamW) on 1 GPU against 2 GPUs (NCCL),
# measured in one run. Shape: GPT-2 small (12 layers, d_model 768, 12 heads, T 1024, vocab 50304 as
# padded bytes), micro-batch 16 x 1024 tokens. Rows: 1 GPU at 16k tokens/step (one micro-batch), 1
# GPU at 32k (two accumulated micro-batches) and 2 GPUs at 32k (one micro-batch per GPU): the last
# two compute the same steps, so their losses are compared too.
#   worker/trainer/cuda/bench/dp_bench.sh ABLATE_TRAIN OUT_DIR [STEPS]
# Prints a markdown table (median tokens/s over the steps after the first 5; MFU against the
# dense bf16 peak of every GPU used) and leaves the logs in OUT_DIR.
set -euo pipefail
train="${1:?usage: dp_bench.sh ABLATE_TRAIN OUT_DIR [STEPS]}"
out="${2:?usage: dp_bench.sh ABLATE_TRAIN OUT_DIR [STEPS]}"
steps="${3:-20}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mkdir -p "$out"

# A byte corpus (vocab padded to 50304): 8 MB of seeded toy sentences.
python3 "$here/toy_corpus.py" "$out/corpus.txt"

run_ablate() {  # name gpus tokens_per_step
  local name="$1" gpus="$2" tps="$3"
  cat > "$out/$name.yaml" <<YAML
seed: 1
data: {corpus: $out/corpus.txt, vocab_size: 50304, val_fraction: 0.01, eval_batches: 1}
model: {seq_len: 1024, layers: 12, d_model: 768, heads: 12, mlp: gelu, tie_embeddings: true}
attention: {kind: fpa, qk_norm: true}
optimizer: {kind: adamw, lr: 6.0e-4, lr_vector: 6.0e-4, weight_decay: 0.1}
train: {steps: $steps, tokens_per_step: $tps, micro_batch: 16, warmup: 5, eval_every: 0,
        diagnostics_every: 0, checkpoint_every: 0, grad_clip: 1.0}
device: cuda
gpus: $gpus
YAML
  "$train" --config "$out/$name.yaml" --out "$out/run_$name" > "$out/$name.jsonl" \
    2> "$out/$name.err" || { echo "ablate-train $name failed:"; cat "$out/$name.err"; return 1; }
  # The final checkpoint (written after the last step; for 2 GPUs it also checks that the replicas
  # hold identical weights) is not needed.
  rm -rf "$out/run_$name/checkpoints"
}
run_ablate gpu1_16k 1 16384
run_ablate gpu1_32k 1 32768
run_ablate gpu2_32k 2 32768

python3 - "$out" <<'PY'
import json, statistics, sys
out = sys.argv[1]
def load(name):
    return [json.loads(l) for l in open(f"{out}/{name}.jsonl")]
rows, dev = [], ""
for name, label in (("gpu1_16k", "1 GPU, 16k tokens/step (1 micro-batch)"),
                    ("gpu1_32k", "1 GPU, 32k tokens/step (2 accumulated micro-batches)"),
                    ("gpu2_32k", "2 GPUs, 32k tokens/step (1 micro-batch per GPU)")):
    lines = load(name)
    start = next(l for l in lines if l["type"] == "start")
    dev = start.get("device", "")
    st = [l for l in lines if l["type"] == "step" and l["step"] > 5]
    rows.append((label, statistics.median(l["tokens_per_s"] for l in st),
                 statistics.median(l["mfu"] for l in st),
                 1e3 * statistics.median(l["step_time_s"] for l in st)))
base = rows[1][1]
print(f"GPU: {dev}; GPT-2 small shape (L12, C768, H12, T1024, V50304), fpa + AdamW, micro-batch 16 x 1024")
print("| run | tokens/s | MFU (all GPUs used) | step ms | vs 1 GPU at 32k |")
print("|---|---|---|---|---|")
for n, tps, mfu, ms in rows:
    print(f"| {n} | {tps:,.0f} | {100 * mfu:.1f}% | {ms:.1f} | {tps / base:.2f}x |")
a = {l["step"]: l for l in load("gpu1_32k") if l["type"] == "step"}
b = {l["step"]: l for l in load("gpu2_32k") if l["type"] == "step"}
d = max(abs(a[s]["loss"] - b[s]["loss"]) for s in a if s in b)
n1 = abs(a[1]["grad_norm"] - b[1]["grad_norm"]) / a[1]["grad_norm"]
print(f"\nSame steps on 1 vs 2 GPUs (32k tokens/step): step 1 |loss difference| "
      f"{abs(a[1]['loss'] - b[1]['loss']):.1e}, rel. grad-norm difference {n1:.1e}; max |loss "
      f"difference| over {len(a)} steps {d:.2e}; final loss {a[max(a)]['loss']:.4f} / "
      f"{b[max(b)]['loss']:.4f}")
PY
