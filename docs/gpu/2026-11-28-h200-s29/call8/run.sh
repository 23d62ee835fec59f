ROOT=$PWD; cd .gpu/c8 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R/n
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
# The non-causal d128 forward's grid (192-row CTAs) against the wave count (132 SMs): N = 1920
# (640 CTAs, 4.85 waves -> 5 rounds), 2048 (704, 5.33 -> 6), 2176 (768, 5.82 -> 6), 2304 (768,
# no partial block), 2496 (832, 6.30 -> 7); B4 H16. The forward kernel alone, in place (ncu
# durations of 8 launches), then the bench's forward (3 runs, alternating N).
NS="1920 2048 2176 2304 2496"
for n in $NS; do
  timeout 90 ncu -k regex:SageForwardKernelV5 --launch-skip 2 --launch-count 8 --cache-control none --clock-control none --metrics gpu__time_duration.sum --csv --page raw $D/bin/ablate-attention-bench --impl sage --shape 4,16,$n,128 --causal no --iters 5 --warmup 1 > $R/n/ncu_$n.csv 2>/dev/null
  python3 kernels/bench/ncu_durations.py $R/n/ncu_$n.csv > $R/n/ncu_$n.txt 2>&1
done
for k in 1 2 3; do
  for n in $NS; do
    timeout 60 $D/bin/ablate-attention-bench --impl sage --shape 4,16,$n,128 --causal no --json $R/n/n${n}_$k.json > /dev/null 2>&1
  done
done
python3 - $NS <<'PY' | tee $R/n_scan.md
import json, re, statistics, sys, os
R = os.environ["OUT"] + "/r/n"
print("| N | CTAs | waves | forward kernel us (ncu, in place) | kernel TOPS | bench fwd ms | bench fwd TOPS |")
print("|---|---|---|---|---|---|---|")
for n in map(int, sys.argv[1:]):
    ctas = 64 * -(-n // 192)
    txt = open(f"{R}/ncu_{n}.txt").read()
    m = re.search(r"median\s+([\d.]+) us", txt)
    us = float(m.group(1)) if m else float("nan")
    ms, tops = [], []
    for k in (1, 2, 3):
        try:
            for r in json.load(open(f"{R}/n{n}_{k}.json"))["results"]:
                if r["impl"] == "sagebwd" and r["pass"] == "fwd":
                    ms.append(r["ms"]); tops.append(r["tflops"])
        except (OSError, ValueError, KeyError):
            pass
    flop = 4 * 4 * 16 * n * n * 128
    print(f"| {n} | {ctas} | {ctas/132:.2f} | {us:.1f} | {flop/us*1e-6:.1f} | {statistics.median(ms):.4f} | {statistics.median(tops):.1f} |")
PY
rm -f $R/n/*.csv
echo "done $(( $(date +%s) - T0 )) s"
cd $OUT && tar -czf r.tgz r && rm -rf r
