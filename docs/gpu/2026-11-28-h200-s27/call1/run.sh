ROOT=$PWD; cd .gpu/c1 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R/ab
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
for t in wgmma_gpu_test sage_scale_gpu_test fpa_gpu_test layers_gpu_test gpt_cuda_test train_cuda_test; do
  $D/bin/$t > $R/$t.log 2>&1; echo "$t rc=$?" >> $R/suite.txt; grep -E "PASSED|FAILED" $R/$t.log | tail -2 >> $R/suite.txt
done
SAGE_BWD_LAB=1 $D/bin/sagebwd_gpu_test > $R/sagebwd_gpu_test.log 2>&1; echo "sagebwd_gpu_test (bwd lab, every compiled variant) rc=$?" >> $R/suite.txt; grep -E "PASSED|FAILED" $R/sagebwd_gpu_test.log | tail -2 >> $R/suite.txt
cat $R/suite.txt; echo "tests $(( $(date +%s) - T0 )) s"
for k in 1 2 3 4; do
  for c in "2,16,8192,128 no" "2,16,8192,128 yes" "4,16,2048,128 no" "4,16,2048,128 yes" "8,16,1024,64 no" "8,16,1024,64 yes" "16,12,1024,64 yes"; do
    set -- $c; n=${1//,/_}_$2_$k
    $D/bin/ablate-attention-bench --impl sage --shape $1 --causal $2 --json $R/ab/new_$n.json > /dev/null 2>&1
    $D/base/ablate-attention-bench --impl sage --shape $1 --causal $2 --json $R/ab/base_$n.json > /dev/null 2>&1
  done
  echo "round $k $(( $(date +%s) - T0 )) s"
done
python3 kernels/bench/ab.py --new $R/ab/new_*.json --base $R/ab/base_*.json --title "backward tile bodies as BwdTile member functions (new) vs HEAD 6e47bdf (base), production variants" > $R/ab_split.md 2>&1
grep -E "\| bwd \|" $R/ab_split.md
$D/bin/ablate-attention-bench --json $R/bench.json > $R/bench.txt 2>&1
python3 kernels/bench/sdpa_bench.py --json $R/sdpa.json > $R/sdpa.txt 2>&1
python3 kernels/bench/compare.py $R/bench.json $R/sdpa.json > $R/compare.md 2>&1
grep -E "fwd\+bwd" $R/compare.md
echo "done $(( $(date +%s) - T0 )) s"
cd $OUT && tar -czf r.tgz r && rm -rf r
