ROOT=$PWD; cd .gpu/s32c7 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
for t in sagebwd_gpu_test gpt_cuda_test train_cuda_test; do
  timeout 300 $D/bin/$t > $R/$t.log 2>&1; echo "$t rc=$?" >> $R/suite.txt; grep -E "PASSED|FAILED" $R/$t.log | tail -3 >> $R/suite.txt
done
cat $R/suite.txt; echo "tests $(( $(date +%s) - T0 )) s"
# dQ by 16-byte reductions at d64 (new) against HEAD; the d128 shapes as controls (unchanged kernels)
AB_FLAGS="--impl sage" bash kernels/bench/ab_run.sh $R/ab 5 "8,16,1024,64:no 8,16,1024,64:yes 16,12,1024,64:yes 16,12,1024,64:no 4,16,2048,128:no 4,16,2048,128:yes" $D/bin/ablate-attention-bench $D/bin/bench-head > $R/ab.txt 2>&1
echo "ab $(( $(date +%s) - T0 )) s"
# in place: the backward kernel and the dQ conversion at the GPT-2 small shape
for b in ablate-attention-bench bench-head; do
  timeout 120 ncu -k 'regex:DqFinal|SageBackwardKernel' --cache-control none --clock-control none --metrics gpu__time_duration.sum --csv --page raw $D/bin/$b --impl sage --shape 16,12,1024,64 --causal yes --iters 20 --warmup 1 > $R/ncu_$b.csv 2>&1
  python3 kernels/bench/ncu_durations.py $R/ncu_$b.csv > $R/durations_$b.txt 2>&1; echo "== $b"; cat $R/durations_$b.txt
done
$D/bin/ablate-attention-bench --json $R/bench.json > $R/bench.txt 2>&1
python3 kernels/bench/sdpa_bench.py --json $R/sdpa.json > $R/sdpa.txt 2>&1
python3 kernels/bench/compare.py $R/bench.json $R/sdpa.json > $R/compare.md 2>&1
echo "done $(( $(date +%s) - T0 )) s"
grep -E "bwd" $R/ab/ab_*.md | grep -v "| fwd |"; grep -E "fwd\+bwd" $R/compare.md
rm -rf $R/ab/bench-* $R/ab/ablate-* $R/*.csv
cd $OUT && tar -czf r.tgz r && rm -rf r
