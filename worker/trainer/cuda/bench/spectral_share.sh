#!/usr/bin/env bash
# The spectral optimizer's share of a GPT-2-small training step at a realistic batch, and the
# optimizer-state memory of 8-bit against fp32 state, with ablate-train (device: cuda).
#   worker/trainer/cuda/bench/spectral_share.sh ABLATE_TRAIN OUT_DIR [STEPS]
# Shape as gpu_train_bench.sh (L12, C768, H12, T1024, V50304 padded bytes, fpa), 0.5M tokens per
# step = 32 micro-batches of 16 x 1024. Rows: AdamW, spectral rms p = 1/2 with optimizer.tf32 on
# and off, and both with 8-bit state. The optimizer's cost is the step time minus the AdamW row's
# (plus AdamW's own ~1 ms, measured in docs/bench/gpu_optim.md); its share is that over the
# spectral row's step time. Median over the steps after the first.
set -euo pipefail
train="${1:?usage: spectral_share.sh ABLATE_TRAIN OUT_DIR [STEPS]}"
out="${2:?usage: spectral_share.sh ABLATE_TRAIN OUT_DIR [STEPS]}"
steps="${3:-4}"
mkdir -p "$out"
python3 - "$out/corpus.txt" <<'PY'
import random, sys
r = random.Random(2)
words = "the a cat dog man child river house moon song bread sees likes finds wants today again with joy".split()
with open(sys.argv[1], "w") as f:
    n = 0
    while n < 40_000_000:
        s = " ".join(r.choice(words) for _ in range(r.randint(4, 12))) + ".\n"
        f.write(s)
        n += len(s)
PY
run() {  # name optimizer-yaml
  local name="$1" opt="$2"
  cat > "$out/$name.yaml" <<YAML
seed: 1
data: {corpus: $out/corpus.txt, vocab_size: 50304, val_fraction: 0.001, eval_batches: 1}
model: {seq_len: 1024, layers: 12, d_model: 768, heads: 12, mlp: gelu, tie_embeddings: true}
attention: {kind: fpa, qk_norm: true}
optimizer: $opt
train: {steps: $steps, tokens_per_step: 524288, micro_batch: 16, warmup: 1, eval_every: 0,
        diagnostics_every: 0, checkpoint_every: 0, grad_clip: 1.0}
device: cuda
YAML
  "$train" --config "$out/$name.yaml" --out "$out/run_$name" > "$out/$name.jsonl" 2> "$out/$name.err" || {
    echo "ablate-train $name failed:"; tail -5 "$out/$name.err"; return 1; }
  rm -rf "$out/run_$name/checkpoints"
}
run adamw "{kind: adamw, lr: 6.0e-4, lr_vector: 6.0e-4}"
run adamw_8bit "{kind: adamw, lr: 6.0e-4, lr_vector: 6.0e-4, state_bits: 8}"
run spectral_tf32 "{kind: spectral, family: rms, p: 0.5, lr: 0.01, lr_vector: 0.003, tf32: true}"
run spectral_fp32 "{kind: spectral, family: rms, p: 0.5, lr: 0.01, lr_vector: 0.003, tf32: false}"
run spectral_tf32_8bit "{kind: spectral, family: rms, p: 0.5, lr: 0.01, lr_vector: 0.003, tf32: true, state_bits: 8}"
python3 - "$out" <<'PY'
import json, statistics, sys
out = sys.argv[1]
def load(name):
    lines = [json.loads(l) for l in open(f"{out}/{name}.jsonl")]
    start = next(l for l in lines if l["type"] == "start")
    st = [l["step_time_s"] for l in lines if l["type"] == "step" and l["step"] > 1]
    return start, statistics.median(st)
base_start, base = load("adamw")
print(f"GPU: {base_start.get('device', '')}; GPT-2 small, fpa, 524288 tokens/step (32 x 16 x 1024)")
print("| optimizer | step s | tokens/s | optimizer ms (vs AdamW + 1 ms) | share of step | state MB | fp32 state MB | saved |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for name in ("adamw", "adamw_8bit", "spectral_tf32", "spectral_fp32", "spectral_tf32_8bit"):
    start, t = load(name)
    opt_ms = 1e3 * (t - base) + 1.0
    share = "-" if name.startswith("adamw") else f"{100 * opt_ms / (1e3 * t):.1f}%"
    extra = "-" if name.startswith("adamw") else f"{opt_ms:.1f}"
    print(f"| {name} | {t:.3f} | {524288 / t:,.0f} | {extra} | {share} | "
          f"{start['optimizer_state_bytes'] / 1e6:.0f} | {start['optimizer_state_bytes_fp32'] / 1e6:.0f} | "
          f"{100 * start['optimizer_state_saved']:.1f}% |")
PY
