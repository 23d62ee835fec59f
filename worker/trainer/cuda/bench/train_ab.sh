#!/usr/bin/env bash
# Interleaved training A/B on one GPU: the bench's GPT-2 small configuration (gpu_train_bench.sh),
# each named variant run RUNS times, alternately, so that clock and thermal drift hit all of them.
#   worker/trainer/cuda/bench/train_ab.sh OUT_DIR STEPS RUNS NAME=ABLATE_TRAIN:KIND [NAME=...]
# KIND is the attention kind (fpa | sagebwd). The first variant is the reference: prints a
# markdown table of median tokens/s (steps after the first 5) per run, each variant's ratio to
# the reference per run, and the means. Example (an earlier run:):
#   train_ab.sh /tmp/ab 30 3 fpa=new/ablate-train:fpa before=old/ablate-train:sagebwd \
#     after=new/ablate-train:sagebwd
set -euo pipefail
out="${1:?usage: train_ab.sh OUT_DIR STEPS RUNS NAME=ABLATE_TRAIN:KIND ...}"
steps="${2:?steps}"
runs="${3:?runs}"
shift 3
[ $# -ge 2 ] || { echo "train_ab.sh: need at least two NAME=ABLATE_TRAIN:KIND variants" >&2; exit 2; }
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/bench_config.sh"
mkdir -p "$out"
[ -f "$out/corpus.txt" ] || python3 "$here/toy_corpus.py" "$out/corpus.txt"
names=()
for v in "$@"; do
  name="${v%%=*}" rest="${v#*=}"
  kind="${rest##*:}"
  case "$name" in (*[!A-Za-z0-9_-]*|"") echo "train_ab.sh: bad name '$name'" >&2; exit 2;; esac
  case "$kind" in (fpa|sagebwd) ;; (*) echo "train_ab.sh: kind must be fpa or sagebwd, got '$kind'" >&2; exit 2;; esac
  names+=("$name")
  bench_trial_yaml "$out/corpus.txt" "$kind" "$steps" > "$out/$name.yaml"
done
for i in $(seq 1 "$runs"); do
  for v in "$@"; do
    name="${v%%=*}" rest="${v#*=}"
    train="${rest%:*}"
    "$train" --config "$out/$name.yaml" --out "$out/run_${name}_$i" > "$out/${name}_$i.jsonl" \
      2> "$out/${name}_$i.err" || { echo "ablate-train $name run $i failed:"; cat "$out/${name}_$i.err"; exit 1; }
    rm -rf "$out/run_${name}_$i/checkpoints"
  done
done
python3 - "$out" "$runs" "${names[@]}" <<'PY'
import json, statistics, sys
out, runs, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
tps = {}
for n in names:
    for i in range(1, runs + 1):
        lines = [json.loads(l) for l in open(f"{out}/{n}_{i}.jsonl") if l.startswith("{")]
        steps = [l for l in lines if l.get("type") == "step" and l["step"] > 5]
        tps.setdefault(n, []).append(statistics.median(l["tokens_per_s"] for l in steps))
ref = names[0]
print("| run | " + " | ".join(f"{n} tokens/s" for n in names) + " | " +
      " | ".join(f"{n} / {ref}" for n in names[1:]) + " |")
print("|---" * (2 * len(names)) + "|")
for i in range(runs):
    print(f"| {i + 1} | " + " | ".join(f"{tps[n][i]:,.0f}" for n in names) + " | " +
          " | ".join(f"{tps[n][i] / tps[ref][i]:.4f}" for n in names[1:]) + " |")
mean = {n: statistics.mean(tps[n]) for n in names}
print("| mean | " + " | ".join(f"{mean[n]:,.0f}" for n in names) + " | " +
      " | ".join(f"**{mean[n] / mean[ref]:.4f}**" for n in names[1:]) + " |")
PY
