ROOT=$PWD; cd .gpu/c6 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
for t in fpa_gpu_test sagebwd_gpu_test wgmma_gpu_test sage_scale_gpu_test layers_gpu_test gpt_cuda_test train_cuda_test; do
  timeout 300 $D/bin/$t > $R/$t.log 2>&1; echo "$t rc=$?" >> $R/suite.txt; grep -E "PASSED|FAILED" $R/$t.log | tail -3 >> $R/suite.txt
done
cat $R/suite.txt; echo "tests $(( $(date +%s) - T0 )) s"
# The kept change (dQ staged by stmatrix) against HEAD, alternating, four rounds.
for k in 1 2 3 4; do
  for s in 4,16,2048,128 2,16,8192,128 8,16,1024,64; do for c in no yes; do
    timeout 60 $D/bin/ablate-attention-bench --impl sage --shape $s --causal $c --json $R/new_${k}_${s}_$c.json > /dev/null 2>&1
    timeout 60 $D/bin/bench-base --impl sage --shape $s --causal $c --json $R/base_${k}_${s}_$c.json > /dev/null 2>&1
  done; done
  timeout 60 $D/bin/ablate-attention-bench --impl sage --shape 16,12,1024,64 --causal yes --json $R/new_${k}_train.json > /dev/null 2>&1
  timeout 60 $D/bin/bench-base --impl sage --shape 16,12,1024,64 --causal yes --json $R/base_${k}_train.json > /dev/null 2>&1
done
python3 kernels/bench/ab.py --new $R/new_*.json --base $R/base_*.json --title "dQ staged by stmatrix vs HEAD" > $R/ab.md
echo "ab $(( $(date +%s) - T0 )) s"
# The final tree beside SDPA, same run, back to back.
$D/bin/ablate-attention-bench --json $R/bench.json > $R/bench.txt 2>&1
python3 kernels/bench/sdpa_bench.py --json $R/sdpa.json > $R/sdpa.txt 2>&1
python3 kernels/bench/compare.py $R/bench.json $R/sdpa.json > $R/compare.md 2>&1
echo "bench $(( $(date +%s) - T0 )) s"
# The stall map of the new backward kernel (as call 1).
timeout 150 ncu -k regex:SageBackwardKernel --launch-skip 1 --launch-count 1 --section WarpStateStats --section SourceCounters --section SchedulerStats --import-source yes -o $R/sage_bwd $D/bin/ablate-attention-bench --impl sage --shape 4,16,2048,128 --causal no --iters 3 --warmup 1 > $R/ncu_sage_log.txt 2>&1
timeout 60 ncu -i $R/sage_bwd.ncu-rep --page source --csv --print-source sass | gzip -9 > $R/sage_bwd_sass.csv.gz
timeout 60 ncu -i $R/sage_bwd.ncu-rep --page details > $R/sage_bwd_details.txt 2>&1
rm -f $R/sage_bwd.ncu-rep
python3 kernels/bench/ncu_stalls.py $R/sage_bwd_sass.csv.gz --top 12 > $R/stalls_sage_bwd.txt 2>&1
echo "done $(( $(date +%s) - T0 )) s"
grep -E "bwd" $R/ab.md; grep -E "fwd\+bwd" $R/compare.md; head -12 $R/stalls_sage_bwd.txt
cd $OUT && tar -czf r.tgz r && rm -rf r
