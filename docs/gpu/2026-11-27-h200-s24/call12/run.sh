ROOT=$PWD; cd .gpu/c12 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R/ab
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
SAGE_BWD_LAB=1 $D/r1f/sagebwd_gpu_test > $R/sagebwd_gpu_test_r1f.log 2>&1; echo "r1f sagebwd (bwd lab) rc=$?" >> $R/suite.txt
cat $R/suite.txt
for k in 1 2 3 4 5 6; do for v in headf r1f; do
  $D/$v/ablate-attention-bench --impl sage --json $R/ab/${v}_$k.json > /dev/null 2>&1
done; done
python3 kernels/bench/ab.py --new $R/ab/r1f_*.json --base $R/ab/headf_*.json --title "predicated dsrow adds in the non-causal d128 kernel too vs ae46a99" > $R/ab_r1f.md
grep -E "bwd \|" $R/ab_r1f.md | awk -F'|' '{print $3, $4, $5, $9}'
echo "done $(( $(date +%s) - T0 )) s"
cd $OUT && tar -czf r.tgz r && rm -rf r
