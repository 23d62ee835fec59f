ROOT=$PWD; cd .gpu/c4 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R/ab
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
for k in 1 2 3; do for sh in 4,16,2048,128 2,16,8192,128; do
  for pair in "swap 16101304 16232376" "dkwg 32878520 33009592" "noop 66432952 66564024"; do
    set -- $pair
    $D/bin/ablate-attention-bench --impl sage --shape $sh --causal no --sage-bwd-variant $2 --json $R/ab/$1_n${sh//,/_}_$k.json > /dev/null 2>&1
    $D/bin/ablate-attention-bench --impl sage --shape $sh --causal yes --sage-bwd-variant $3 --json $R/ab/$1_c${sh//,/_}_$k.json > /dev/null 2>&1
  done
done; done
python3 kernels/bench/ab.py --new $R/ab/dkwg_*.json --base $R/ab/swap_*.json --title "dK warpgroup vs keys as rows" > $R/ab_dkwg_swap.md 2>&1
python3 kernels/bench/ab.py --new $R/ab/noop_*.json --base $R/ab/swap_*.json --title "dK warpgroup without its dK work (timing only) vs keys as rows" > $R/ab_noop_swap.md 2>&1
for f in ab_dkwg_swap ab_noop_swap; do echo $f; grep -E "\| bwd \|" $R/$f.md | awk -F'|' '{print $3, $4, $9}'; done
echo "done $(( $(date +%s) - T0 )) s"
cd $OUT && tar -czf r.tgz r && rm -rf r
