ROOT=$PWD; cd .gpu/c4 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R/ab $R/sass
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
cuobjdump -sass $D/bin/ablate-attention-bench > /tmp/all.sass
for pat in "SageForwardKernelV5ILi128ELb0ELb0ELb1ELb0ELb1ELb0ELb1ELb1ELb0ELb1ELb1EE:fwd128_nc" "SageForwardKernelV5ILi128ELb1ELb0ELb1ELb1ELb1ELb0ELb1ELb1ELb0ELb1ELb1EE:fwd128_c" "SageForwardKernelV5ILi64ELb0ELb0ELb1ELb0ELb0ELb0ELb0ELb0ELb0ELb1ELb0EE:fwd64_nc" "SageForwardKernelV5ILi64ELb1ELb0ELb1ELb1ELb0ELb0ELb0ELb0ELb0ELb1ELb0EE:fwd64_c" "SageBackwardKernelILi64ELb0ELi2207672E:bwd64_nc" "SageBackwardKernelILi64ELb1ELi2338744E:bwd64_c"; do
  p=${pat%%:*}; n=${pat##*:}
  awk -v pat="$p" '/Function :/{q=($0 ~ pat)} q' /tmp/all.sass > $R/sass/$n.sass
  echo "$n $(wc -l < $R/sass/$n.sass)" >> $R/sass/counts.txt
done
cat $R/sass/counts.txt; echo "sass $(( $(date +%s) - T0 )) s"
for t in layers_gpu_test gpt_cuda_test train_cuda_test; do
  $D/bin/$t > $R/$t.log 2>&1; echo "$t rc=$?" >> $R/suite.txt; grep -E "PASSED|FAILED" $R/$t.log | tail -2 >> $R/suite.txt
done
SAGE_BWD_LAB=1 SAGE_FWD_LAB=1 $D/bin/sagebwd_gpu_test > $R/sagebwd_gpu_test_labs.log 2>&1; echo "sagebwd_gpu_test (labs) rc=$?" >> $R/suite.txt; grep -E "PASSED|FAILED" $R/sagebwd_gpu_test_labs.log | tail -2 >> $R/suite.txt
cat $R/suite.txt; echo "tests $(( $(date +%s) - T0 )) s"
for k in 1 2 3 4 5; do for v in base bin; do
  $D/$v/ablate-attention-bench --impl sage --json $R/ab/${v}_$k.json > /dev/null 2>&1
  $D/$v/ablate-attention-bench --impl sage --shape 16,12,1024,64 --causal yes --json $R/ab/${v}t_$k.json > /dev/null 2>&1
done; done
python3 kernels/bench/ab.py --new $R/ab/bin_*.json $R/ab/bint_*.json --base $R/ab/base_*.json $R/ab/baset_*.json --title "session 24 tree (d64 column inverse scales four blocks ahead) vs 1234a30" > $R/ab_final.md
grep -E "bwd \|" $R/ab_final.md | awk -F'|' '{print $3, $4, $5, $9}'; echo "ab $(( $(date +%s) - T0 )) s"
$D/bin/ablate-attention-bench --json $R/bench_1.json > $R/bench_1.txt 2>&1
python3 kernels/bench/sdpa_bench.py --json $R/sdpa_1.json > $R/sdpa_1.txt 2>&1
python3 kernels/bench/compare.py $R/bench_1.json $R/sdpa_1.json > $R/compare_1.md 2>&1
cat $R/compare_1.md; echo "compare $(( $(date +%s) - T0 )) s"
cd $OUT && tar -czf r.tgz r && rm -rf r
