ROOT=$PWD; cd .gpu/c1 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R/ab
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
for t in wgmma_gpu_test sage_scale_gpu_test fpa_gpu_test layers_gpu_test gpt_cuda_test train_cuda_test; do
  $D/bin/$t > $R/$t.log 2>&1; echo "$t rc=$?" >> $R/suite.txt; grep -E "PASSED|FAILED" $R/$t.log | tail -2 >> $R/suite.txt
done
SAGE_BWD_LAB=1 SAGE_BWD_LAB_VARS=7843768,16232376,7712696,16101304 $D/bin/sagebwd_gpu_test > $R/sagebwd_gpu_test.log 2>&1; echo "sagebwd_gpu_test (bwd lab) rc=$?" >> $R/suite.txt; grep -E "PASSED|FAILED" $R/sagebwd_gpu_test.log | tail -2 >> $R/suite.txt
cat $R/suite.txt; echo "tests $(( $(date +%s) - T0 )) s"
for k in 1 2 3 4 5; do for sh in 4,16,2048,128 2,16,8192,128; do
  $D/bin/ablate-attention-bench --impl sage --shape $sh --causal yes --sage-bwd-variant 7843768 --json $R/ab/base_c${sh//,/_}_$k.json > /dev/null 2>&1
  $D/bin/ablate-attention-bench --impl sage --shape $sh --causal yes --sage-bwd-variant 16232376 --json $R/ab/new_c${sh//,/_}_$k.json > /dev/null 2>&1
  $D/bin/ablate-attention-bench --impl sage --shape $sh --causal no --sage-bwd-variant 7712696 --json $R/ab/base_n${sh//,/_}_$k.json > /dev/null 2>&1
  $D/bin/ablate-attention-bench --impl sage --shape $sh --causal no --sage-bwd-variant 16101304 --json $R/ab/new_n${sh//,/_}_$k.json > /dev/null 2>&1
done; done
python3 kernels/bench/ab.py --new $R/ab/new_*.json --base $R/ab/base_*.json --title "keys as rows (16101304 / 16232376) vs v12 (7712696 / 7843768)" > $R/ab_swap.md 2>&1
grep -E "\| bwd \|" $R/ab_swap.md
echo "ab $(( $(date +%s) - T0 )) s"
$D/bin/ablate-attention-bench --json $R/bench.json > $R/bench.txt 2>&1
python3 kernels/bench/sdpa_bench.py --json $R/sdpa.json > $R/sdpa.txt 2>&1
python3 kernels/bench/compare.py $R/bench.json $R/sdpa.json > $R/compare.md 2>&1
grep -E "fwd\+bwd" $R/compare.md
echo "done $(( $(date +%s) - T0 )) s"
cd $OUT && tar -czf r.tgz r && rm -rf r
