ROOT=$PWD; cd .gpu/c8 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R/ab
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
# Causal d128 forward below N = 4096 with the head groups: three consumer warpgroups (28) against
# production's two (21), same binary, alternating.
for k in 1 2 3; do
  for sh in 4,16,2048,128 8,16,2048,128 16,16,1024,128 2,16,2048,128; do
    n=${sh//,/_}_$k
    $D/bin/ablate-attention-bench --impl sage --shape $sh --causal yes --sage-fwd-variant 28 --json $R/ab/new_$n.json > /dev/null 2>&1
    $D/bin/ablate-attention-bench --impl sage --shape $sh --causal yes --sage-fwd-variant 21 --json $R/ab/base_$n.json > /dev/null 2>&1
  done
  echo "round $k $(( $(date +%s) - T0 )) s"
done
python3 kernels/bench/ab.py --new $R/ab/new_*.json --base $R/ab/base_*.json --title "causal d128 forward: 28 (three consumer warpgroups; new) vs 21 (two; base, production below N4096), with the head groups" > $R/ab_fwd.md 2>&1
grep -E "\| fwd \|" $R/ab_fwd.md
echo "done $(( $(date +%s) - T0 )) s"
cd $OUT && tar -czf r.tgz r && rm -rf r
