ROOT=$PWD; cd .gpu/s32c3 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
timeout 300 $D/bin/sagebwd_gpu_test > $R/sagebwd_gpu_test.log 2>&1; echo "sagebwd_gpu_test rc=$?" > $R/suite.txt
grep -E "PASSED|FAILED" $R/sagebwd_gpu_test.log | tail -3 >> $R/suite.txt; cat $R/suite.txt
echo "tests $(( $(date +%s) - T0 )) s"
# The column maxima through shared memory (new) against HEAD, every TileRows shape
AB_FLAGS="--impl sage" bash kernels/bench/ab_run.sh $R/ab 5 "4,16,2048,128:no 2,16,8192,128:no 8,16,1024,64:no 8,16,1024,64:yes 16,12,1024,64:yes" $D/bin/ablate-attention-bench $D/bin/bench-head > $R/ab.txt 2>&1
# HEAD's keys-as-rows backward (16101304, compiled for the lab) on the non-causal d128 shapes
AB_FLAGS="--impl sage" bash kernels/bench/ab_run.sh $R/ab_swap 4 "4,16,2048,128:no 2,16,8192,128:no" $D/bin/bench-swapnc $D/bin/bench-head > $R/ab_swap.txt 2>&1
echo "ab $(( $(date +%s) - T0 )) s"
grep -E "bwd" $R/ab/ab_*.md $R/ab_swap/ab_*.md | grep -v "| fwd |"
rm -rf $R/ab/bench-* $R/ab/ablate-* $R/ab_swap/bench-*
cd $OUT && tar -czf r.tgz r && rm -rf r
