ROOT=$PWD; cd .gpu/c6 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R
nvidia-smi -L > $R/nvidia-smi-L.txt
for t in fpa_gpu_test sagebwd_gpu_test; do
  timeout 300 $D/bin/$t > $R/$t.log 2>&1; echo "$t rc=$?" >> $R/suite.txt; grep -E "PASSED|FAILED" $R/$t.log | tail -3 >> $R/suite.txt
done
cat $R/suite.txt
cd $OUT && tar -czf r.tgz r && rm -rf r
