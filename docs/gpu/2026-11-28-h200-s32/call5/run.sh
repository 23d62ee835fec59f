ROOT=$PWD; cd .gpu/s32c5 && tar -xJf bundle.tar.xz && D=$PWD/bundle && U=$PWD/bench-unstripped && cd $ROOT
R=$OUT/r; mkdir -p $R
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
timeout 300 $D/bin/sagebwd_gpu_test > $R/sagebwd_gpu_test.log 2>&1; echo "sagebwd_gpu_test rc=$?" > $R/suite.txt
grep -E "PASSED|FAILED" $R/sagebwd_gpu_test.log | tail -3 >> $R/suite.txt; cat $R/suite.txt
echo "tests $(( $(date +%s) - T0 )) s"
# Where ptxas spills in the non-causal d128 backward with dQ by 16-byte reductions
(cd $R && mkdir -p cub && cd cub && cuobjdump -xelf all $U > /dev/null 2>&1; ls > ../cubins.txt 2>&1
 for C in *.cubin; do
   cuobjdump -sass -fun '_ZN6ablate7kernels43_GLOBAL__N__2d541504_10_sagebwd_cu_f49c813718SageBackwardKernelILi128ELb0ELi7712696EEEvNS1_9BwdParamsE' $C > s.txt 2>&1
   if grep -q "STL\|LDL\|HGMMA\|IGMMA" s.txt; then mv s.txt ../sass_7712696.txt; fi
 done
 cd .. && rm -rf cub; grep -n -B3 -A1 "STL\|LDL" sass_7712696.txt > spills_7712696.txt; wc -l sass_7712696.txt spills_7712696.txt)
AB_FLAGS="--impl sage" bash kernels/bench/ab_run.sh $R/ab 4 "4,16,2048,128:no 2,16,8192,128:no 4,16,2048,128:yes 8,16,1024,64:no 8,16,1024,64:yes 16,12,1024,64:yes" $D/bin/ablate-attention-bench $D/bin/bench-head > $R/ab.txt 2>&1
echo "ab $(( $(date +%s) - T0 )) s"
grep -E "bwd" $R/ab/ab_*.md | grep -v "| fwd |"
rm -rf $R/ab/bench-* $R/ab/ablate-*
cd $OUT && tar -czf r.tgz r && rm -rf r
