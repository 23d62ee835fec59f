ROOT=$PWD; cd .gpu/c8 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R/ab
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
SAGE_BWD_LAB=1 SAGE_BWD_LAB_VARS=16101304,32878520,16232376,33009592 $D/bin/sagebwd_gpu_test --gtest_filter='*BwdVariantLab*' > $R/lab.log 2>&1; echo "lab rc=$?"; grep -E "PASSED|FAILED|Failure" $R/lab.log | head -10
for k in 1 2 3 4; do for sh in 4,16,2048,128 2,16,8192,128; do
  for pair in "base 7712696 7843768" "swap 16101304 16232376" "solo 32878520 33009592"; do
    set -- $pair
    $D/bin/ablate-attention-bench --impl sage --shape $sh --causal no --sage-bwd-variant $2 --json $R/ab/$1_n${sh//,/_}_$k.json > /dev/null 2>&1
    $D/bin/ablate-attention-bench --impl sage --shape $sh --causal yes --sage-bwd-variant $3 --json $R/ab/$1_c${sh//,/_}_$k.json > /dev/null 2>&1
  done
done; done
python3 kernels/bench/ab.py --new $R/ab/solo_*.json --base $R/ab/swap_*.json --title "solo dS^ scales (32878520 / 33009592) vs keys as rows (16101304 / 16232376)" > $R/ab_solo_swap.md 2>&1
python3 kernels/bench/ab.py --new $R/ab/solo_*.json --base $R/ab/base_*.json --title "solo dS^ scales (32878520 / 33009592) vs v12 (7712696 / 7843768)" > $R/ab_solo_base.md 2>&1
for f in ab_solo_swap ab_solo_base; do echo $f; grep -E "\| bwd \|" $R/$f.md | awk -F'|' '{print $3, $4, $9}'; done
echo "done $(( $(date +%s) - T0 )) s"
cd $OUT && tar -czf r.tgz r && rm -rf r
