ROOT=$PWD; cd .gpu/c8 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
for t in fpa_gpu_test sagebwd_gpu_test wgmma_gpu_test sage_scale_gpu_test layers_gpu_test gpt_cuda_test train_cuda_test; do
  timeout 300 $D/bin/$t > $R/$t.log 2>&1; echo "$t rc=$?" >> $R/suite.txt; grep -E "PASSED|FAILED" $R/$t.log | tail -3 >> $R/suite.txt
done
cat $R/suite.txt; echo "tests $(( $(date +%s) - T0 )) s"
# The final tree (new) against the session's start 87d8e0f (base) and fb9ca75 (the stmatrix dQ
# staging alone), alternating, four rounds.
for k in 1 2 3 4; do
  for s in 4,16,2048,128 2,16,8192,128 8,16,1024,64; do for c in no yes; do
    for b in ablate-attention-bench bench-fb9 bench-base; do
      timeout 60 $D/bin/$b --impl sage --shape $s --causal $c --json $R/${b}_${k}_${s}_$c.json > /dev/null 2>&1
    done
  done; done
  for b in ablate-attention-bench bench-fb9 bench-base; do
    timeout 60 $D/bin/$b --impl sage --shape 16,12,1024,64 --causal yes --json $R/${b}_${k}_train.json > /dev/null 2>&1
  done
done
python3 kernels/bench/ab.py --new $R/ablate-attention-bench_*.json --base $R/bench-base_*.json --title "final tree vs 87d8e0f" > $R/ab_vs_start.md
python3 kernels/bench/ab.py --new $R/ablate-attention-bench_*.json --base $R/bench-fb9_*.json --title "final tree (inverse scales 4 ahead at d128) vs fb9ca75" > $R/ab_vs_fb9.md
echo "ab $(( $(date +%s) - T0 )) s"
$D/bin/ablate-attention-bench --json $R/bench.json > $R/bench.txt 2>&1
python3 kernels/bench/sdpa_bench.py --json $R/sdpa.json > $R/sdpa.txt 2>&1
python3 kernels/bench/compare.py $R/bench.json $R/sdpa.json > $R/compare.md 2>&1
echo "done $(( $(date +%s) - T0 )) s"
grep -E "bwd|vs" $R/ab_vs_start.md $R/ab_vs_fb9.md | grep -v "| fwd |"; grep -E "fwd\+bwd" $R/compare.md
cd $OUT && tar -czf r.tgz r && rm -rf r
