ROOT=$PWD; cd .gpu/c7 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
for t in wgmma_gpu_test sage_scale_gpu_test fpa_gpu_test layers_gpu_test gpt_cuda_test train_cuda_test; do
  $D/bin/$t > $R/$t.log 2>&1; echo "$t rc=$?" >> $R/suite.txt; grep -E "PASSED|FAILED" $R/$t.log | tail -2 >> $R/suite.txt
done
SAGE_BWD_LAB=1 SAGE_FWD_LAB=1 $D/bin/sagebwd_gpu_test > $R/sagebwd_gpu_test.log 2>&1; echo "sagebwd_gpu_test (both labs) rc=$?" >> $R/suite.txt; grep -E "PASSED|FAILED" $R/sagebwd_gpu_test.log | tail -2 >> $R/suite.txt
cat $R/suite.txt; echo "done $(( $(date +%s) - T0 )) s"
cd $OUT && tar -czf r.tgz r && rm -rf r
