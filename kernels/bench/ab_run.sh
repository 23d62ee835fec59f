#!/usr/bin/env bash
# Same-run A/B of ablate-attention-bench binaries on the GPU machine: every binary runs every
# shape, one after the other, ROUNDS times over (so clock and thermal drift hit all of them),
# each run's JSON kept under OUT; then ab.py tables each binary against the last one (the base).
#   kernels/bench/ab_run.sh OUT ROUNDS "B,H,N,D:causal ..." BIN [BIN ...] BASE
# causal: yes or no. Extra bench flags (e.g. --impl sage) go in AB_FLAGS. Binaries need distinct
# file names: OUT/<name>/<round>_<shape>_<causal>.json, OUT/ab_<name>.md.
#   kernels/bench/ab_run.sh r 4 "4,16,2048,128:no 4,16,2048,128:yes" new/ablate-attention-bench base/bench
set -uo pipefail
out="${1:?usage: ab_run.sh OUT ROUNDS SHAPES BIN [BIN ...] BASE}"
rounds="${2:?rounds}"
shapes="${3:?shapes}"
shift 3
[ "$#" -ge 2 ] || { echo "ab_run.sh: at least two binaries (the last is the base)" >&2; exit 2; }
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mkdir -p "$out"
names=()
for bin in "$@"; do
  name="$(basename "$bin")"
  for seen in "${names[@]+"${names[@]}"}"; do
    [ "$seen" != "$name" ] || { echo "ab_run.sh: two binaries named $name" >&2; exit 2; }
  done
  names+=("$name")
  mkdir -p "$out/$name"
done
for ((k = 1; k <= rounds; ++k)); do
  for sc in $shapes; do
    shape="${sc%%:*}" causal="${sc##*:}"
    case "$causal" in yes | no) ;; *) echo "ab_run.sh: $sc: causal must be yes or no" >&2; exit 2 ;; esac
    for bin in "$@"; do
      timeout 120 "$bin" ${AB_FLAGS:-} --shape "$shape" --causal "$causal" \
        --json "$out/$(basename "$bin")/${k}_${shape}_${causal}.json" >/dev/null 2>&1 ||
        echo "ab_run.sh: $bin --shape $shape --causal $causal failed (round $k)" >&2
    done
  done
done
base="${names[-1]}"
for name in "${names[@]:0:${#names[@]}-1}"; do
  python3 "$here/ab.py" --new "$out/$name"/*.json --base "$out/$base"/*.json \
    --title "$name (new) vs $base (base), $rounds rounds" >"$out/ab_$name.md" && cat "$out/ab_$name.md"
done
