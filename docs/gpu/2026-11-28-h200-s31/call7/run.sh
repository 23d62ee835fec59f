ROOT=$PWD; cd .gpu/c7 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
# The P^T / dS^T codes' column inverse scales loaded 3 or 4 blocks ahead at d128 (2 in fb9ca75),
# alternating, five rounds, the non-causal d128 shapes (the causal d128 kernel does not use it).
for k in 1 2 3 4 5; do
  for s in 4,16,2048,128 2,16,8192,128; do
    for b in bench-a3 bench-a4 bench-base; do
      timeout 60 $D/bin/$b --impl sage --shape $s --causal no --json $R/${b}_${k}_${s}.json > /dev/null 2>&1
    done
  done
done
python3 kernels/bench/ab.py --new $R/bench-a3_*.json --base $R/bench-base_*.json --title "3 ahead vs 2" > $R/ab_a3.md
python3 kernels/bench/ab.py --new $R/bench-a4_*.json --base $R/bench-base_*.json --title "4 ahead vs 2" > $R/ab_a4.md
cat $R/ab_a3.md $R/ab_a4.md | grep -E "bwd|ahead"
echo "done $(( $(date +%s) - T0 )) s"
cd $OUT && tar -czf r.tgz r && rm -rf r
