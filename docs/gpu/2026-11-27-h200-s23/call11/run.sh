ROOT=$PWD; cd .gpu/c11 && tar -xJf bundle.tar.xz && B=$PWD/bundle/bin && BASE=$PWD/bundle/base && cd $ROOT
R=$OUT/r; mkdir -p $R/ab
nvidia-smi -L > $R/nvidia-smi-L.txt
for t in wgmma_gpu_test fpa_gpu_test sage_scale_gpu_test layers_gpu_test gpt_cuda_test train_cuda_test optim_gpu_test; do
  $B/$t > $R/$t.log 2>&1; echo "$t rc=$?" >> $R/suite.txt; grep -E "PASSED|FAILED" $R/$t.log | tail -2 >> $R/suite.txt
done
SAGE_BWD_LAB=1 SAGE_FWD_LAB=1 $B/sagebwd_gpu_test > $R/sagebwd_gpu_test_labs.log 2>&1; echo "sagebwd_gpu_test (labs) rc=$?" >> $R/suite.txt; grep -E "PASSED|FAILED" $R/sagebwd_gpu_test_labs.log | tail -2 >> $R/suite.txt
cat $R/suite.txt
for k in 1 2 3; do
  $B/ablate-attention-bench --impl sage --json $R/ab/new_$k.json > /dev/null 2>&1
  $BASE/ablate-attention-bench --impl sage --json $R/ab/base_$k.json > /dev/null 2>&1
  $B/ablate-attention-bench --impl sage --shape 16,12,1024,64 --causal yes --json $R/ab/newt_$k.json > /dev/null 2>&1
  $BASE/ablate-attention-bench --impl sage --shape 16,12,1024,64 --causal yes --json $R/ab/baset_$k.json > /dev/null 2>&1
done
python3 kernels/bench/ab.py --new $R/ab/new_*.json $R/ab/newt_*.json --base $R/ab/base_*.json $R/ab/baset_*.json --title "final tree vs ebd922a" > $R/ab_final.md
cat $R/ab_final.md
for k in 1 2; do
  $B/ablate-attention-bench --json $R/bench_$k.json > $R/bench_$k.txt 2>&1
  python3 kernels/bench/sdpa_bench.py --json $R/sdpa_$k.json > $R/sdpa_$k.txt 2>&1
  python3 kernels/bench/compare.py $R/bench_$k.json $R/sdpa_$k.json > $R/compare_$k.md 2>&1
done
cat $R/compare_1.md $R/compare_2.md
cd $OUT && tar -czf r.tgz r && rm -rf r
