ROOT=$PWD; cd .gpu/c5 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R/ab
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
for k in 1 2 3; do for sh in 4,16,2048,128 2,16,8192,128; do
  for pair in "swap 16101304 16232376" "nodq 83210168 83341240" "nodv 150319032 150450104" "nodk 284536760 284667832" "nocodes 552972216 553103288"; do
    set -- $pair
    $D/bin/ablate-attention-bench --impl sage --shape $sh --causal no --sage-bwd-variant $2 --json $R/ab/$1_n${sh//,/_}_$k.json > /dev/null 2>&1
    $D/bin/ablate-attention-bench --impl sage --shape $sh --causal yes --sage-bwd-variant $3 --json $R/ab/$1_c${sh//,/_}_$k.json > /dev/null 2>&1
  done
done; done
for x in nodq nodv nodk nocodes; do
  python3 kernels/bench/ab.py --new $R/ab/${x}_*.json --base $R/ab/swap_*.json --title "keys as rows without part '$x' (timing only) vs keys as rows" > $R/ab_$x.md 2>&1
  echo $x; grep -E "\| bwd \|" $R/ab_$x.md | awk -F'|' '{print $3, $4, $9}'
done
echo "done $(( $(date +%s) - T0 )) s"
cd $OUT && tar -czf r.tgz r && rm -rf r
