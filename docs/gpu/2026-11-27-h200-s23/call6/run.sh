ROOT=$PWD; cd .gpu/c6 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R/ab
nvidia-smi -L > $R/nvidia-smi-L.txt
for k in 1 2 3 4; do
  for v in r1 base r2 c4 r3; do
    $D/$v/ablate-attention-bench --impl sage --json $R/ab/${v}_$k.json > /dev/null 2>&1
    $D/$v/ablate-attention-bench --impl sage --shape 16,12,1024,64 --causal yes --json $R/ab/${v}t_$k.json > /dev/null 2>&1
  done
done
for v in c4 r1 r2 r3; do
  python3 kernels/bench/ab.py --new $R/ab/${v}_*.json $R/ab/${v}t_*.json --base $R/ab/base_*.json $R/ab/baset_*.json --title "$v vs ebd922a" > $R/ab_${v}.md
  grep -E "bwd \||fwd\+bwd" $R/ab_${v}.md | awk -F'|' -v v=$v '{print v, $3, $4, $5, $9}'
done
cd $OUT && tar -czf r.tgz r && rm -rf r
