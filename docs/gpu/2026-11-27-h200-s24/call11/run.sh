ROOT=$PWD; cd .gpu/c11 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R/ab
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
for t in fpa_gpu_test layers_gpu_test gpt_cuda_test train_cuda_test; do
  $D/bin/$t > $R/$t.log 2>&1; echo "$t rc=$?" >> $R/suite.txt; grep -E "PASSED|FAILED" $R/$t.log | tail -2 >> $R/suite.txt
done
SAGE_BWD_LAB=1 SAGE_FWD_LAB=1 $D/bin/sagebwd_gpu_test > $R/sagebwd_gpu_test_labs.log 2>&1; echo "sagebwd_gpu_test (labs) rc=$?" >> $R/suite.txt; grep -E "PASSED|FAILED" $R/sagebwd_gpu_test_labs.log | tail -2 >> $R/suite.txt
cat $R/suite.txt; echo "tests $(( $(date +%s) - T0 )) s"
for k in 1 2 3 4 5; do for v in base bin; do
  $D/$v/ablate-attention-bench --impl sage --json $R/ab/${v}_$k.json > /dev/null 2>&1
  $D/$v/ablate-attention-bench --impl sage --shape 16,12,1024,64 --causal yes --json $R/ab/${v}t_$k.json > /dev/null 2>&1
done; done
python3 kernels/bench/ab.py --new $R/ab/bin_*.json $R/ab/bint_*.json --base $R/ab/base_*.json $R/ab/baset_*.json --title "session 24 final tree (ae46a99) vs 1234a30" > $R/ab_final.md
grep -E "bwd \|" $R/ab_final.md | awk -F'|' '{print $3, $4, $5, $9}'; echo "ab $(( $(date +%s) - T0 )) s"
for k in 1 2; do
  $D/bin/ablate-attention-bench --json $R/bench_$k.json > $R/bench_$k.txt 2>&1
  python3 kernels/bench/sdpa_bench.py --json $R/sdpa_$k.json > $R/sdpa_$k.txt 2>&1
  python3 kernels/bench/compare.py $R/bench_$k.json $R/sdpa_$k.json > $R/compare_$k.md 2>&1
done
cat $R/compare_1.md $R/compare_2.md | grep -E "fwd\+bwd|bwd"
echo "done $(( $(date +%s) - T0 )) s"
cd $OUT && tar -czf r.tgz r && rm -rf r
