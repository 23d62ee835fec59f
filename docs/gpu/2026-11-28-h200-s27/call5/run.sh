ROOT=$PWD; cd .gpu/c5 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R/ab
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
for t in gpt_cuda_test train_cuda_test sagebwd_gpu_test; do
  $D/bin/$t > $R/$t.log 2>&1; echo "$t rc=$?" >> $R/suite.txt; grep -E "PASSED|FAILED" $R/$t.log | tail -2 >> $R/suite.txt
done
grep -E "OK \] SageBwdGpu.LptHeadGroups" $R/sagebwd_gpu_test.log
cat $R/suite.txt; echo "tests $(( $(date +%s) - T0 )) s"
# Same binary: causal grids longest-first in head groups (LptHeadsAuto, the default) vs across
# all heads (--sage-lpt-heads 1000000, the order before), alternating.
for k in 1 2 3 4; do
  for sh in 4,16,2048,128 8,16,2048,128 2,16,8192,128 1,16,16384,128 8,16,1024,64 16,12,1024,64; do
    n=${sh//,/_}_$k
    $D/bin/ablate-attention-bench --impl sage --shape $sh --causal yes --json $R/ab/new_$n.json > /dev/null 2>&1
    $D/bin/ablate-attention-bench --impl sage --shape $sh --causal yes --sage-lpt-heads 1000000 --json $R/ab/base_$n.json > /dev/null 2>&1
  done
  echo "round $k $(( $(date +%s) - T0 )) s"
done
python3 kernels/bench/ab.py --new $R/ab/new_*.json --base $R/ab/base_*.json --title "causal grids longest-first in head groups (new: LptHeadsAuto) vs across all heads (base: --sage-lpt-heads 1000000)" > $R/ab_lpt.md 2>&1
grep -E "\| (fwd|bwd|fwd\+bwd) \|" $R/ab_lpt.md
$D/bin/ablate-attention-bench --json $R/bench.json > $R/bench.txt 2>&1
python3 kernels/bench/sdpa_bench.py --json $R/sdpa.json > $R/sdpa.txt 2>&1
python3 kernels/bench/compare.py $R/bench.json $R/sdpa.json > $R/compare.md 2>&1
grep -E "fwd\+bwd" $R/compare.md
echo "done $(( $(date +%s) - T0 )) s"
cd $OUT && tar -czf r.tgz r && rm -rf r
