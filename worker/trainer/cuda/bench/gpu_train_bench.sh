#!/usr/bin/env bash
# GPU training speed: ablate-train (device: cuda; fpa + AdamW and sagebwd + AdamW) against the
# PyTorch reference model of the same shape (torch_gpt_ref.py: torch.compile, bf16 autocast, SDPA,
# fused AdamW), measured in one run on one GPU, at three shapes of 16,384 tokens per step (12 layers,
# d_model 768, vocab 50304 as padded bytes, one micro-batch per step):
#   gpt2s       GPT-2 small: T 1024, 12 heads (head dim 64), micro-batch 16
#   t4096_d128  T 4096, 6 heads (head dim 128), micro-batch 4
#   t8192_d128  T 8192, 6 heads (head dim 128), micro-batch 2
#   worker/trainer/cuda/bench/gpu_train_bench.sh ABLATE_TRAIN OUT_DIR [STEPS] [SHAPE ...]
# (default: all three shapes). The reference's SDPA is pinned to GPU_TRAIN_SDPA (default cudnn, the
# fastest on Hopper; auto: PyTorch's own choice). Each ablate-train config also runs with its GEMMs
# tuned (ablate-train --tune-gemm on the shape once, then --gemm-tuning; GPU_TRAIN_GEMM_TUNING=0
# leaves those rows out). Prints a markdown table per shape (median tokens/s over the steps after
# the first 5, MFU at the GPU's dense bf16 peak) and leaves the logs in OUT_DIR.
set -euo pipefail
usage="usage: gpu_train_bench.sh ABLATE_TRAIN OUT_DIR [STEPS] [SHAPE ...]"
train="${1:?$usage}"
out="${2:?$usage}"
steps="${3:-30}"
shift $(($# < 3 ? $# : 3))
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/bench_config.sh"
declare -A shape_of=()
all=()
for sh in "${BENCH_SHAPES[@]}"; do
  read -r n rest <<<"$sh"
  shape_of[$n]="$rest"
  all+=("$n")
done
names=("$@")
[ "${#names[@]}" -gt 0 ] || names=("${all[@]}")
for name in "${names[@]}"; do
  [ -n "${shape_of[$name]+x}" ] || { echo "gpu_train_bench.sh: unknown shape $name (${all[*]})" >&2; exit 2; }
done
mkdir -p "$out"

# A byte corpus (vocab padded to 50304): 8 MB of seeded toy sentences.
python3 "$here/toy_corpus.py" "$out/corpus.txt"

tuning="${GPU_TRAIN_GEMM_TUNING:-1}"
for name in "${names[@]}"; do
  read -r T heads micro <<<"${shape_of[$name]}"
  variants=("")
  if [ "$tuning" != 0 ]; then
    # One table per shape: fpa's and sagebwd's GEMMs are the same problems.
    bench_trial_yaml "$out/corpus.txt" fpa "$steps" "$T" "$heads" "$micro" > "$out/$name.tune.yaml"
    tuned_flags=$(bench_tune_gemm "$train" "$out/$name.tune.yaml" "$out/$name.tuning")
    variants+=(_tuned)
  fi
  for att in fpa sagebwd; do
    for v in "${variants[@]}"; do
      run="$name.${att}_adamw$v"
      flags=()
      if [ -n "$v" ]; then
        # Without a table the tuned row is left to fail (and says so) rather than run untuned.
        [ -n "$tuned_flags" ] || { : > "$out/$run.jsonl"; continue; }
        read -r -a flags <<<"$tuned_flags"
      fi
      bench_trial_yaml "$out/corpus.txt" "$att" "$steps" "$T" "$heads" "$micro" > "$out/$run.yaml"
      "$train" --config "$out/$run.yaml" --out "$out/run_$run" "${flags[@]}" > "$out/$run.jsonl" \
        2> "$out/$run.err" || { echo "ablate-train $run failed:"; tail -20 "$out/$run.err"; }
      rm -rf "$out/run_$run/checkpoints"
    done
  done
  python3 "$here/torch_gpt_ref.py" --steps "$steps" --seq "$T" --heads "$heads" --batch "$micro" \
    --sdpa "${GPU_TRAIN_SDPA:-cudnn}" > "$out/$name.torch.json" 2> "$out/$name.torch.err" ||
    { echo "torch reference $name failed:"; tail -20 "$out/$name.torch.err"; }
done

python3 - "$out" "${names[@]}" <<'PY'
import json, os, statistics, sys
out, names = sys.argv[1], sys.argv[2:]
for name in names:
    rows, ref, dev, shape = [], None, "", ""
    tpath = f"{out}/{name}.torch.json"
    if os.path.exists(tpath) and os.path.getsize(tpath) > 0:
        t = json.loads(open(tpath).read().strip().splitlines()[-1])
        ref = t["tokens_per_s"]
        rows.append((f"{t['impl']} (fused AdamW, SDPA {t.get('sdpa') or 'default'})",
                     t["tokens_per_s"], t["mfu"], t["step_ms"]))
    for att in ("fpa", "sagebwd"):
      for v in ("", "_tuned"):
        path = f"{out}/{name}.{att}_adamw{v}.jsonl"
        if v and not os.path.exists(path):
            continue  # GPU_TRAIN_GEMM_TUNING=0
        lines = [json.loads(l) for l in open(path)] if os.path.exists(path) else []
        start = next((l for l in lines if l["type"] == "start"), {})
        steps = [l for l in lines if l["type"] == "step" and l["step"] > 5]
        label = f"ablate-train {att} + adamw" + (", tuned GEMMs" if v else "")
        if not steps:
            err = f"{name}.tuning.err" if v and os.path.getsize(path) == 0 else f"{name}.{att}_adamw{v}.err"
            rows.append((f"{label} (failed: {err})", None, None, None))
            continue
        if v and "not_used" in start.get("gemm_tuning", {}):
            label += f" (table not used: {start['gemm_tuning']['not_used']})"
        dev = start.get("device", dev)
        tps = statistics.median(l["tokens_per_s"] for l in steps)
        mfu = statistics.median(l["mfu"] for l in steps)
        ms = 1e3 * statistics.median(l["step_time_s"] for l in steps)
        rows.append((f"{label} (optimizer on {start.get('optimizer_device')})", tps, mfu, ms))
    print(f"\n{name}: GPU {dev}")
    print("| implementation | tokens/s | MFU | step ms | vs PyTorch |")
    print("|---|---|---|---|---|")
    for n, tps, mfu, ms in rows:
        if tps is None:
            print(f"| {n} | | | | |")
            continue
        rel = f"{tps / ref:.2f}x" if ref else "n/a"
        print(f"| {n} | {tps:,.0f} | {100 * mfu:.1f}% | {ms:.1f} | {rel} |")
PY
