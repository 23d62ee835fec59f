ROOT=$PWD; cd .gpu/c2 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R/ab $R/sweep
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
for t in fpa_gpu_test sagebwd_gpu_test wgmma_gpu_test sage_scale_gpu_test layers_gpu_test gpt_cuda_test train_cuda_test; do
  timeout 300 $D/bin/$t > $R/$t.log 2>&1; echo "$t rc=$?" >> $R/suite.txt; grep -E "PASSED|FAILED" $R/$t.log | tail -3 >> $R/suite.txt
done
grep -E "OK \] FpaGpuGrid|FAILED" $R/fpa_gpu_test.log | head
cat $R/suite.txt; echo "tests $(( $(date +%s) - T0 )) s"
# Same binary: FPA's causal grids in head groups (default, LptHeadsAuto) vs head by head
# (--fpa-lpt-heads 1, the order before), alternating.
for k in 1 2 3 4; do
  for sh in 4,16,2048,128 8,16,2048,128 2,16,8192,128 1,16,16384,128 8,16,1024,64 16,12,1024,64; do
    n=${sh//,/_}_$k
    timeout 60 $D/bin/ablate-attention-bench --impl fpa --shape $sh --causal yes --json $R/ab/new_$n.json > /dev/null 2>&1
    timeout 60 $D/bin/ablate-attention-bench --impl fpa --shape $sh --causal yes --fpa-lpt-heads 1 --json $R/ab/base_$n.json > /dev/null 2>&1
  done
  echo "round $k $(( $(date +%s) - T0 )) s"
done
python3 kernels/bench/ab.py --new $R/ab/new_*.json --base $R/ab/base_*.json --title "FPA causal grids longest-first in head groups (new: LptHeadsAuto) vs head by head (base: --fpa-lpt-heads 1)" > $R/ab_fpa_lpt.md 2>&1
grep -E "\| (fwd|bwd|fwd\+bwd) \|" $R/ab_fpa_lpt.md
# Group sizes, one run each.
for sh in 8,16,2048,128 16,12,1024,64; do
  for g in 1 2 4 8 16 32 64 1000000; do
    timeout 60 $D/bin/ablate-attention-bench --impl fpa --shape $sh --causal yes --fpa-lpt-heads $g --json $R/sweep/g${g}_${sh//,/_}.json > $R/sweep/g${g}_${sh//,/_}.txt 2>&1
  done
done
grep -H "fwd" $R/sweep/*.txt | grep "| fpa" > $R/sweep.txt
echo "sweep $(( $(date +%s) - T0 )) s"
$D/bin/ablate-attention-bench --json $R/bench.json > $R/bench.txt 2>&1
python3 kernels/bench/sdpa_bench.py --json $R/sdpa.json > $R/sdpa.txt 2>&1
python3 kernels/bench/compare.py $R/bench.json $R/sdpa.json > $R/compare.md 2>&1
grep -E "fwd\+bwd" $R/compare.md
echo "done $(( $(date +%s) - T0 )) s"
cd $OUT && tar -czf r.tgz r && rm -rf r
