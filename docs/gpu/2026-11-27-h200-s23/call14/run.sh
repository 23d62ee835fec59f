ROOT=$PWD; cd .gpu/c14 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R/ab
nvidia-smi -L > $R/nvidia-smi-L.txt
SAGE_BWD_LAB=1 SAGE_FWD_LAB=1 $D/bin/sagebwd_gpu_test > $R/sagebwd_gpu_test_labs.log 2>&1; echo "sagebwd (labs) rc=$?" >> $R/suite.txt; tail -1 $R/sagebwd_gpu_test_labs.log
for k in 1 2 3 4; do for v in bin final; do
  $D/$v/ablate-attention-bench --impl sage --json $R/ab/${v}_$k.json > /dev/null 2>&1
  $D/$v/ablate-attention-bench --impl sage --shape 16,12,1024,64 --causal yes --json $R/ab/${v}t_$k.json > /dev/null 2>&1
done; done
python3 kernels/bench/ab.py --new $R/ab/bin_*.json $R/ab/bint_*.json --base $R/ab/final_*.json $R/ab/finalt_*.json --title "dQ bulk reduction issued after the next epilogue vs bb34303" > $R/ab_flush.md
grep -E "bwd \|" $R/ab_flush.md | awk -F'|' '{print $3, $4, $9}'
cd $OUT && tar -czf r.tgz r && rm -rf r
