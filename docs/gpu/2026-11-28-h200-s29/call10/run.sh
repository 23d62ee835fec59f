ROOT=$PWD; cd .gpu/c10 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R
nvidia-smi -L > $R/nvidia-smi-L.txt
# Review mend (LptGrid: the four launch sites' grid and group-size choice in one place; host code
# only, PTX identical): the tests that run the causal grids, and the bench's causal rows.
for t in fpa_gpu_test sagebwd_gpu_test gpt_cuda_test; do
  timeout 300 $D/bin/$t > $R/$t.log 2>&1; echo "$t rc=$?" >> $R/suite.txt; grep -E "PASSED|FAILED" $R/$t.log | tail -3 >> $R/suite.txt
done
grep -E "OK \] .*(Lpt|Grid)|FAILED" $R/*.log | head
cat $R/suite.txt
timeout 120 $D/bin/ablate-attention-bench --causal yes > $R/bench_causal.txt 2>&1; tail -15 $R/bench_causal.txt
cd $OUT && tar -czf r.tgz r && rm -rf r
