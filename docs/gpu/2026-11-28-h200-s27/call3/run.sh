ROOT=$PWD; cd .gpu/c3 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R/scan $R/ncu
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
# Sequence-length scan at 16384 tokens per batch (B x N), H16 d128, both masks: the attention
# benches (fpa, sagebwd production) and SDPA flash / cuDNN on the same shapes, same run.
S="16,16,1024,128 8,16,2048,128 4,16,4096,128 2,16,8192,128 1,16,16384,128"
for sh in $S; do
  $D/bin/ablate-attention-bench --shape $sh --json $R/scan/bench_${sh//,/_}.json > /dev/null 2>&1
done
echo "bench $(( $(date +%s) - T0 )) s"
python3 kernels/bench/sdpa_bench.py $(for sh in $S; do echo --shape $sh; done) --json $R/scan/sdpa.json > $R/scan/sdpa.txt 2>&1
python3 kernels/bench/compare.py $R/scan/bench_*.json $R/scan/sdpa.json > $R/scan/compare.md 2>&1
grep -E "fwd\+bwd" $R/scan/compare.md
echo "sdpa $(( $(date +%s) - T0 )) s"
# Per-launch durations of SageBwd's kernels at each N (in situ: no cache flush, the bench's clocks).
for sh in $S; do for c in no yes; do
  ncu -k 'regex:Sage|Quantize|KMean|DqFinal' --cache-control none --clock-control none \
      --metrics gpu__time_duration.sum --csv --page raw \
      $D/bin/ablate-attention-bench --impl sage --shape $sh --causal $c --iters 20 --warmup 1 2> $R/ncu/err_${sh//,/_}_$c.txt | gzip > $R/ncu/ncu_${sh//,/_}_$c.csv.gz
done; echo "ncu $sh $(( $(date +%s) - T0 )) s"; done
python3 kernels/bench/ncu_durations.py --split 21 $R/ncu/ncu_*.csv.gz > $R/ncu_durations.txt 2>&1
cat $R/ncu_durations.txt | head -80
echo "done $(( $(date +%s) - T0 )) s"
cd $OUT && tar -czf r.tgz r && rm -rf r
