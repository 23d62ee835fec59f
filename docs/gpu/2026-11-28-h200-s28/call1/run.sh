ROOT=$PWD; cd .gpu/c1 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R/ab
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
for t in sagebwd_gpu_test gpt_cuda_test train_cuda_test; do
  timeout 300 $D/bin/$t > $R/$t.log 2>&1; echo "$t rc=$?" >> $R/suite.txt; grep -E "PASSED|FAILED" $R/$t.log | tail -3 >> $R/suite.txt
done
grep -E "OK \] SageBwdGpu.(Persistent|Rejects)|FAILED" $R/sagebwd_gpu_test.log | head
cat $R/suite.txt; echo "tests $(( $(date +%s) - T0 )) s"
SAGE_FWD_LAB=1 SAGE_FWD_LAB_VARS=27,29,32,28,30,31,21 timeout 200 $D/bin/sagebwd_gpu_test --gtest_filter='*FwdVariantLab*' > $R/fwdlab.log 2>&1
echo "fwdlab rc=$? $(( $(date +%s) - T0 )) s"; grep -E "^\||FAILED|OK \]" $R/fwdlab.log | head -60
# Same binary, fwd+bwd bench: persistent forwards against production's, alternating.
for k in 1 2 3; do
  for sh in 4,16,2048,128 2,16,8192,128; do
    for v in 27 29 32; do
      timeout 60 $D/bin/ablate-attention-bench --impl sage --shape $sh --causal no --sage-fwd-variant $v --json $R/ab/v${v}_nc_${sh//,/_}_$k.json > /dev/null 2>&1
    done
    for v in 21 28 30 31; do
      timeout 60 $D/bin/ablate-attention-bench --impl sage --shape $sh --causal yes --sage-fwd-variant $v --json $R/ab/v${v}_c_${sh//,/_}_$k.json > /dev/null 2>&1
    done
  done
  echo "round $k $(( $(date +%s) - T0 )) s"
done
echo "done $(( $(date +%s) - T0 )) s"
cd $OUT && tar -czf r.tgz r && rm -rf r
