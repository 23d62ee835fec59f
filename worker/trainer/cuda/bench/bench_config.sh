# Sourced by gpu_train_bench.sh, step_profile.sh and train_ab.sh: the trial config they measure,
# GPT-2 small on one GPU (12 layers, d_model 768, 12 heads, T 1024, vocab 50304 as padded bytes,
# micro-batch 16, one micro-batch per step, AdamW; no eval, diagnostics or checkpoints inside the timed steps; the
# attention backward with atomics, as PyTorch's, not the deterministic default: docs/bench/gpu_train.md).
#   bench_trial_yaml CORPUS KIND STEPS > trial.yaml      (KIND: fpa | sagebwd)
#   bench_trial_yaml CORPUS KIND STEPS T HEADS MICRO     (another sequence length / head size:
#                                                         d_model 768, MICRO x T tokens per step)
bench_trial_yaml() {
  local T="${4:-1024}" heads="${5:-12}" micro="${6:-16}"
  cat <<YAML
seed: 1
data: {corpus: $1, vocab_size: 50304, val_fraction: 0.01, eval_batches: 1}
model: {seq_len: $T, layers: 12, d_model: 768, heads: $heads, mlp: gelu, tie_embeddings: true}
attention: {kind: $2, qk_norm: true, deterministic: false}
optimizer: {kind: adamw, lr: 6.0e-4, lr_vector: 6.0e-4, weight_decay: 0.1}
train: {steps: $3, tokens_per_step: $((T * micro)), micro_batch: $micro, warmup: 5, eval_every: 0,
        diagnostics_every: 0, checkpoint_every: 0, grad_clip: 1.0}
device: cuda
YAML
}

# The training shapes of gpu_train_bench.sh and step_profile.sh, 16,384 tokens per step each
# (d_model 768): "name T heads micro-batch" (GPT-2 small, then head dim 128 at T 4096 and 8192).
BENCH_SHAPES=("gpt2s 1024 12 16" "t4096_d128 4096 6 4" "t8192_d128 8192 6 2")

# GEMM tuning for a bench config (ablate-train --tune-gemm; docs/bench/gemm.md): writes the table
# to OUT.json and its printout to OUT.txt, and prints the flags that replay it, or nothing (with
# the reason on stderr) when tuning failed, so the caller's tuned rows then say "failed".
#   flags=$(bench_tune_gemm ABLATE_TRAIN TRIAL_YAML OUT)
bench_tune_gemm() {
  if "$1" --config "$2" --tune-gemm "$3.json" > "$3.txt" 2> "$3.err"; then
    echo "--gemm-tuning $3.json"
  else
    echo "ablate-train --tune-gemm $2 failed:" >&2
    tail -5 "$3.err" >&2
  fi
}
