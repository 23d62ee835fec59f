ROOT=$PWD; cd .gpu/c2 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
for t in fpa_gpu_test sagebwd_gpu_test wgmma_gpu_test sage_scale_gpu_test layers_gpu_test gpt_cuda_test train_cuda_test; do
  timeout 300 $D/bin/$t > $R/$t.log 2>&1; echo "$t rc=$?" >> $R/suite.txt; grep -E "PASSED|FAILED" $R/$t.log | tail -3 >> $R/suite.txt
done
cat $R/suite.txt; echo "tests $(( $(date +%s) - T0 )) s"
# The final tree beside SDPA, same run, back to back.
$D/bin/ablate-attention-bench --json $R/bench.json > $R/bench.txt 2>&1
python3 kernels/bench/sdpa_bench.py --json $R/sdpa.json > $R/sdpa.txt 2>&1
python3 kernels/bench/compare.py $R/bench.json $R/sdpa.json > $R/compare.md 2>&1
grep -E "fwd\+bwd" $R/compare.md
echo "done $(( $(date +%s) - T0 )) s"
cd $OUT && tar -czf r.tgz r && rm -rf r
