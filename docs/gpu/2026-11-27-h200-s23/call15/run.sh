ROOT=$PWD; cd .gpu/c15 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R/ab
nvidia-smi -L > $R/nvidia-smi-L.txt
$D/bin/sage_scale_gpu_test > $R/sage_scale_gpu_test.log 2>&1; echo "sage_scale rc=$?" >> $R/suite.txt
SAGE_BWD_LAB=1 SAGE_FWD_LAB=1 $D/bin/sagebwd_gpu_test > $R/sagebwd_gpu_test_labs.log 2>&1; echo "sagebwd (labs) rc=$?" >> $R/suite.txt
grep -h -E "PASSED|FAILED" $R/*.log; cat $R/suite.txt
for k in 1 2 3; do for v in bin final; do
  $D/$v/ablate-attention-bench --impl sage --json $R/ab/${v}_$k.json > /dev/null 2>&1
  $D/$v/ablate-attention-bench --impl sage --shape 16,12,1024,64 --causal yes --json $R/ab/${v}t_$k.json > /dev/null 2>&1
done; done
python3 kernels/bench/ab.py --new $R/ab/bin_*.json $R/ab/bint_*.json --base $R/ab/final_*.json $R/ab/finalt_*.json --title "review mend (one reciprocal test in both paths) vs 4304662" > $R/ab_mend.md
grep -E "bwd \|" $R/ab_mend.md | awk -F'|' '{print $3, $4, $9}'
cd $OUT && tar -czf r.tgz r && rm -rf r
