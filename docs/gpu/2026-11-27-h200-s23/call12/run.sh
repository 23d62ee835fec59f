ROOT=$PWD; cd .gpu/c12 && tar -xJf bundle.tar.xz && B=$PWD/bundle/bin && cd $ROOT
R=$OUT/r; mkdir -p $R
nvidia-smi -L > $R/nvidia-smi-L.txt
for t in wgmma_gpu_test sage_scale_gpu_test; do $B/$t > $R/$t.log 2>&1; echo "$t rc=$?" >> $R/suite.txt; grep -E "PASSED|FAILED" $R/$t.log | tail -2 >> $R/suite.txt; done
cat $R/suite.txt
cd $OUT && tar -czf r.tgz r && rm -rf r
