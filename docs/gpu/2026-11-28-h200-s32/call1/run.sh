ROOT=$PWD; cd .gpu/s32c1 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
timeout 300 $D/bin/sagebwd_gpu_test > $R/sagebwd_gpu_test.log 2>&1; echo "sagebwd_gpu_test rc=$?" > $R/suite.txt
grep -E "PASSED|FAILED" $R/sagebwd_gpu_test.log | tail -3 >> $R/suite.txt; cat $R/suite.txt
echo "tests $(( $(date +%s) - T0 )) s"
AB_FLAGS="--impl sage" bash kernels/bench/ab_run.sh $R/ab 4 "4,16,2048,128:no 4,16,2048,128:yes 2,16,8192,128:no 8,16,1024,64:no 8,16,1024,64:yes 16,12,1024,64:yes" $D/bin/ablate-attention-bench $D/bin/bench-base > $R/ab.txt 2>&1
echo "ab $(( $(date +%s) - T0 )) s"
grep -E "bwd" $R/ab/ab_*.md | grep -v "| fwd |"
cd $OUT && tar -czf r.tgz r && rm -rf r
