ROOT=$PWD; cd .gpu/c13 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R/ab
nvidia-smi -L > $R/nvidia-smi-L.txt
for k in 1 2 3; do for v in nored final; do
  $D/$v/ablate-attention-bench --impl sage --json $R/ab/${v}_$k.json > /dev/null 2>&1
done; done
python3 kernels/bench/ab.py --new $R/ab/nored_*.json --base $R/ab/final_*.json --title "EXPERIMENT (wrong dQ): no dsrow adds vs the final tree" > $R/ab_nored.md
grep -E "bwd \|" $R/ab_nored.md | awk -F'|' '{print $3, $4, $9}'
cd $OUT && tar -czf r.tgz r && rm -rf r
