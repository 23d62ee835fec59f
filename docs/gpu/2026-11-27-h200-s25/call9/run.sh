ROOT=$PWD; cd .gpu/c9 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R/ab
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
SAGE_BWD_LAB=1 SAGE_BWD_LAB_VARS=7712696,16101304,32878520,49655736,66432952,7843768,16232376,66564024 $D/bin/sagebwd_gpu_test --gtest_filter='*BwdVariantLab*' > $R/lab.log 2>&1; echo "lab rc=$?"; grep -E "PASSED|FAILED|Failure" $R/lab.log | head
echo "lab $(( $(date +%s) - T0 )) s"
for k in 1 2 3 4; do for sh in 4,16,2048,128 2,16,8192,128; do
  for pair in "base 7712696" "swap 16101304" "tree 32878520" "late 49655736" "both 66432952"; do
    set -- $pair
    $D/bin/ablate-attention-bench --impl sage --shape $sh --causal no --sage-bwd-variant $2 --json $R/ab/$1_n${sh//,/_}_$k.json > /dev/null 2>&1
  done
  for pair in "base 7843768" "swap 16232376" "both 66564024"; do
    set -- $pair
    $D/bin/ablate-attention-bench --impl sage --shape $sh --causal yes --sage-bwd-variant $2 --json $R/ab/$1_c${sh//,/_}_$k.json > /dev/null 2>&1
  done
done; done
for v in swap tree late both; do
  python3 kernels/bench/ab.py --new $R/ab/${v}_*.json --base $R/ab/base_*.json --title "$v vs production" > $R/ab_${v}.md 2>&1
  python3 kernels/bench/ab.py --new $R/ab/${v}_*.json --base $R/ab/swap_*.json --title "$v vs swap" > $R/ab_${v}_swap.md 2>&1
  echo "$v vs production"; grep -E "\| bwd \|" $R/ab_${v}.md | awk -F'|' '{print $3, $4, $9}'
  echo "$v vs swap"; grep -E "\| bwd \|" $R/ab_${v}_swap.md | awk -F'|' '{print $3, $4, $9}'
done
echo "done $(( $(date +%s) - T0 )) s"
cd $OUT && tar -czf r.tgz r && rm -rf r
