ROOT=$PWD; cd .gpu/c10 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R/ab
nvidia-smi -L > $R/nvidia-smi-L.txt
SAGE_BWD_LAB=1 $D/bin/sagebwd_gpu_test > $R/sagebwd_gpu_test_lab.log 2>&1; echo "sagebwd rc=$?" >> $R/suite.txt; tail -1 $R/sagebwd_gpu_test_lab.log
for k in 1 2 3 4; do
  for v in bin h; do
    $D/$v/ablate-attention-bench --impl sage --json $R/ab/${v}_$k.json > /dev/null 2>&1
    $D/$v/ablate-attention-bench --impl sage --shape 16,12,1024,64 --causal yes --json $R/ab/${v}t_$k.json > /dev/null 2>&1
  done
done
python3 kernels/bench/ab.py --new $R/ab/bin_*.json $R/ab/bint_*.json --base $R/ab/h_*.json $R/ab/ht_*.json --title "dQ staging wait in every lane vs the final tree" > $R/ab_wait.md
grep -E "bwd \|" $R/ab_wait.md | awk -F'|' '{print $3, $4, $9}'
cd $OUT && tar -czf r.tgz r && rm -rf r
