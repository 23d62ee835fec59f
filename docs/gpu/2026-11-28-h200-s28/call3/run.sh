ROOT=$PWD; cd .gpu/c3 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R/ab
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
bash worker/trainer/cuda/bench/gpu_train_bench.sh $D/bin/ablate-train /tmp/tb 30 > $R/train_bench.md 2>&1; echo "rc=$?"
cat $R/train_bench.md
for f in fpa_adamw sagebwd_adamw; do tail -2 /tmp/tb/$f.jsonl > $R/${f}_tail.jsonl; cp /tmp/tb/$f.yaml $R/; done
cp /tmp/tb/torch.json $R/ 2>/dev/null
echo "bench $(( $(date +%s) - T0 )) s"
# The fpa trial, this tree's ablate-train (FPA causal grids in head groups) vs the one before
# (66694ad: FPA head by head), alternating.
for k in 1 2 3; do
  for b in new base; do
    bin=$D/bin/ablate-train; [ $b = base ] && bin=$D/base/ablate-train
    $bin --config /tmp/tb/fpa_adamw.yaml --out /tmp/tb/ab_${b}_$k > $R/ab/${b}_$k.jsonl 2> $R/ab/${b}_$k.err
    rm -rf /tmp/tb/ab_${b}_$k
  done
done
python3 - $R/ab <<'PY' > $R/ab_train.md
import json, statistics, sys, glob
d = sys.argv[1]
med = {}
for b in ("new", "base"):
    v = []
    for f in sorted(glob.glob(f"{d}/{b}_*.jsonl")):
        steps = [json.loads(l) for l in open(f)]
        steps = [l for l in steps if l.get("type") == "step" and l["step"] > 5]
        v.append(statistics.median(l["tokens_per_s"] for l in steps))
    med[b] = v
print("| binary | tokens/s per run | median |")
print("|---|---|---|")
for b, v in med.items():
    print(f"| {b} | {', '.join(f'{x:,.0f}' for x in v)} | {statistics.median(v):,.0f} |")
print(f"\nnew / base: {statistics.median(med['new']) / statistics.median(med['base']):.3f}")
PY
cat $R/ab_train.md
echo "done $(( $(date +%s) - T0 )) s"
cd $OUT && tar -czf r.tgz r && rm -rf r
