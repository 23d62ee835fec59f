ROOT=$PWD; cd .gpu/s32c2 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
# Timing probes (results wrong, not for use): the non-causal d128 backward with barriers dropped.
AB_FLAGS="--impl sage" bash kernels/bench/ab_run.sh $R/ab 5 "4,16,2048,128:no 2,16,8192,128:no" $D/bin/bench-p1 $D/bin/bench-p2 $D/bin/bench-p3 $D/bin/bench-p4 $D/bin/bench-head > $R/ab.txt 2>&1
echo "ab $(( $(date +%s) - T0 )) s"
grep -E "bwd" $R/ab/ab_*.md | grep -v "| fwd |"
rm -rf $R/ab/bench-*
cd $OUT && tar -czf r.tgz r && rm -rf r
