ROOT=$PWD; cd .gpu/c2 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R/ab
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
timeout 240 $D/bin/sagebwd_gpu_test > $R/sagebwd_gpu_test.log 2>&1; echo "sagebwd_gpu_test rc=$?" > $R/suite.txt
grep -E "PASSED|FAILED" $R/sagebwd_gpu_test.log | tail -3 >> $R/suite.txt; cat $R/suite.txt
echo "tests $(( $(date +%s) - T0 )) s"
# kBwdFuseDq (16777216) on production's four backward variants: the lab's emulator checks and
# its interleaved backward-launcher timing (ratios against the first of each pair's list).
SAGE_BWD_LAB=1 SAGE_BWD_LAB_VARS=7712696,24489912,16232376,33009592,2207672,18984888,2338744,19115960 timeout 300 $D/bin/sagebwd_gpu_test --gtest_filter=*BwdVariantLab* > $R/lab_fuse.log 2>&1; echo "lab rc=$?"
grep -E "OK|FAILED|^\|" $R/lab_fuse.log | head -60
echo "lab $(( $(date +%s) - T0 )) s"
# Bench A/B, same binary: production (new = fused variant given explicitly, base = default).
for k in 1 2 3 4; do
  for sc in 4,16,2048,128:no:24489912 4,16,2048,128:yes:33009592 2,16,8192,128:no:24489912 2,16,8192,128:yes:33009592 16,12,1024,64:yes:19115960 8,16,1024,64:no:18984888; do
    IFS=: read sh c v <<< "$sc"; n=${sh//,/_}_${c}_$k
    timeout 60 $D/bin/ablate-attention-bench --impl sage --shape $sh --causal $c --sage-bwd-variant $v --json $R/ab/new_$n.json > /dev/null 2>&1
    timeout 60 $D/bin/ablate-attention-bench --impl sage --shape $sh --causal $c --json $R/ab/base_$n.json > /dev/null 2>&1
  done
  echo "round $k $(( $(date +%s) - T0 )) s"
done
python3 kernels/bench/ab.py --new $R/ab/new_*.json --base $R/ab/base_*.json --title "SageBwd: dQ converted in the backward kernel by each head's last CTA (new, kBwdFuseDq) vs DqFinalizeKernel (base, production)" > $R/ab_fuse.md 2>&1
grep -E "\| (fwd|bwd|fwd\+bwd) \|" $R/ab_fuse.md
echo "done $(( $(date +%s) - T0 )) s"
cd $OUT && tar -czf r.tgz r && rm -rf r
