#!/usr/bin/env bash
# Where a training step's time goes, ablate-train beside PyTorch + torch.compile in the same run
# (issue "Faster than PyTorch where attention dominates", item 0): for GPT-2 small (T 1024, head
# dim 64) and two long-context shapes (T 4096 and 8192, head dim 128, d_model 768, 16,384 tokens
# per step each), ablate-train --profile (fpa and sagebwd; CUDA events on the model's stream:
# trainer/model/step_profile.h) and torch_gpt_ref.py --profile with SDPA pinned to BACKEND
# (default cudnn; torch.profiler's kernel times by kind, and the time no kernel covers). fpa is
# profiled once more with its GEMMs tuned (--tune-gemm on the shape, then --gemm-tuning: the
# "fpa tuned" column; STEP_PROFILE_GEMM_TUNING=0 leaves it out).
#   worker/trainer/cuda/bench/step_profile.sh ABLATE_TRAIN OUT_DIR [STEPS] [BACKEND]
# Prints one markdown table per shape (ms per step by kind of work) and leaves every log in OUT_DIR.
set -euo pipefail
train="${1:?usage: step_profile.sh ABLATE_TRAIN OUT_DIR [STEPS] [BACKEND]}"
out="${2:?usage: step_profile.sh ABLATE_TRAIN OUT_DIR [STEPS] [BACKEND]}"
steps="${3:-10}"
sdpa="${4:-cudnn}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/bench_config.sh"
mkdir -p "$out"
python3 "$here/toy_corpus.py" "$out/corpus.txt"

# name T heads micro
shapes=("${BENCH_SHAPES[@]}")
for shape in "${shapes[@]}"; do
  read -r name T heads micro <<<"$shape"
  runs=(fpa sagebwd)
  [ "${STEP_PROFILE_GEMM_TUNING:-1}" = 0 ] || runs+=(fpa_tuned)
  for run in "${runs[@]}"; do
    kind="${run%_tuned}"
    flags=()
    if [ "$run" != "$kind" ]; then
      tuned_flags=$(bench_tune_gemm "$train" "$out/$name.fpa.yaml" "$out/$name.tuning")
      [ -n "$tuned_flags" ] || continue
      read -r -a flags <<<"$tuned_flags"
    fi
    bench_trial_yaml "$out/corpus.txt" "$kind" $((steps + 6)) "$T" "$heads" "$micro" \
      > "$out/$name.$run.yaml"
    "$train" --config "$out/$name.$run.yaml" --out "$out/run_$name.$run" --profile "$steps" \
      "${flags[@]}" > "$out/$name.$run.jsonl" 2> "$out/$name.$run.err" ||
      { echo "ablate-train $name $run failed:"; tail -5 "$out/$name.$run.err"; }
    rm -rf "$out/run_$name.$run/checkpoints"
  done
  python3 "$here/torch_gpt_ref.py" --seq "$T" --heads "$heads" --batch "$micro" --steps 10 \
    --sdpa "$sdpa" --profile "$steps" > "$out/$name.torch.json" 2> "$out/$name.torch.err" ||
    { echo "torch reference $name failed:"; tail -5 "$out/$name.torch.err"; }
done

python3 - "$out" "$sdpa" "${shapes[@]}" <<'PY'
import json, os, sys
out, sdpa, shapes = sys.argv[1], sys.argv[2], sys.argv[3:]

def ablate_profile(path):
    """The profile line of an ablate-train run: {"kinds": {kind: ms per step}, "step_ms",
    "tokens_per_s"} from its flat profile.<kind>_ms numbers."""
    if not os.path.exists(path):
        return None
    for line in open(path):
        j = json.loads(line)
        if j.get("type") == "profile":
            kinds = {k[len("profile."):-len("_ms")]: v for k, v in j.items()
                     if k.startswith("profile.") and k.endswith("_ms")
                     and k not in ("profile.step_ms", "profile.between_steps_ms")}
            return {"kinds": kinds, "step_ms": j["profile.step_ms"],
                    "tokens_per_s": j["profile.tokens_per_s"]}
    return None

for shape in shapes:
    name, T, heads, micro = shape.split()
    fpa = ablate_profile(f"{out}/{name}.fpa.jsonl")
    sage = ablate_profile(f"{out}/{name}.sagebwd.jsonl")
    tuned = ablate_profile(f"{out}/{name}.fpa_tuned.jsonl")
    torch_path = f"{out}/{name}.torch.json"
    tp = None
    if os.path.exists(torch_path) and os.path.getsize(torch_path) > 0:
        tp = json.loads(open(torch_path).read().strip().splitlines()[-1])
    d = 768 // int(heads)
    print(f"\n{name}: T {T}, head dim {d}, {int(T) * int(micro):,} tokens per step")
    print("| kind of work | ablate fpa ms | ablate fpa, tuned GEMMs ms | ablate sagebwd ms | "
          "| PyTorch kind | PyTorch ms |")
    print("|---|---:|---:|---:|---|---|---:|")
    ref = fpa or sage or {"kinds": {}}
    kinds = sorted(ref["kinds"], key=lambda k: -ref["kinds"][k])
    tk = sorted((tp or {}).get("profile", {}).get("kernels_ms", {}).items(), key=lambda kv: -kv[1])
    if tp and "profile" in tp:
        tk.append(("idle (no kernel)", tp["profile"]["idle_ms"]))
    for i in range(max(len(kinds), len(tk))):
        k = kinds[i] if i < len(kinds) else ""
        a = f"{fpa['kinds'][k]:.2f}" if fpa and k else ""
        t = f"{tuned['kinds'][k]:.2f}" if tuned and k else ""
        b = f"{sage['kinds'][k]:.2f}" if sage and k else ""
        tn, tv = (tk[i][0], f"{tk[i][1]:.2f}") if i < len(tk) else ("", "")
        print(f"| {k} | {a} | {t} | {b} | | {tn} | {tv} |")
    step = lambda p: f"{p['step_ms']:.2f}" if p else "n/a"
    tstep = f"{tp['profile']['step_ms']:.2f}" if tp and "profile" in tp else "n/a"
    print(f"| **step** | {step(fpa)} | {step(tuned)} | {step(sage)} | | **step** | {tstep} |")
    tps = lambda p: f"{p['tokens_per_s']:,.0f}" if p else "n/a"
    ttps = f"{tp['tokens_per_s']:,.0f}" if tp else "n/a"
    backend = tp.get("profile", {}).get("attention_backend", "?") if tp else "?"
    print(f"| tokens/s | {tps(fpa)} | {tps(tuned)} | {tps(sage)} | | tokens/s (SDPA {sdpa}, ran: "
          f"{backend}) | {ttps} |")
PY
