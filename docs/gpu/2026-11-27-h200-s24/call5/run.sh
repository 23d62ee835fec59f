ROOT=$PWD; cd .gpu/c5 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R/ab $R/trace
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
# (1) the prefetch (M4, two ahead at d128) against the base on the v11 backward (no early phase 1)
# and on production, non-causal d128, alternating, 4 rounds
for k in 1 2 3 4; do for v in base m4; do
  for sh in 4,16,2048,128 2,16,8192,128; do
    n=$(echo $sh | tr , _)
    $D/$v/ablate-attention-bench --impl sage --shape $sh --causal no --sage-bwd-variant 3518392 --json $R/ab/${v}_v11_${n}_$k.json > /dev/null 2>&1
    $D/$v/ablate-attention-bench --impl sage --shape $sh --causal no --json $R/ab/${v}_prod_${n}_$k.json > /dev/null 2>&1
  done
done; done
for n in 4_16_2048_128 2_16_8192_128; do
  python3 kernels/bench/ab.py --new $R/ab/m4_v11_${n}_*.json --base $R/ab/base_v11_${n}_*.json --title "M4 vs base, v11 backward (3518392), $n non-causal" > $R/ab_v11_$n.md
  python3 kernels/bench/ab.py --new $R/ab/m4_prod_${n}_*.json --base $R/ab/base_prod_${n}_*.json --title "M4 vs base, production backward, $n non-causal" > $R/ab_prod_$n.md
done
grep -h -E "bwd \|" $R/ab_v11_*.md $R/ab_prod_*.md | awk -F'|' '{print $3, $4, $5, $9}'
echo "ab $(( $(date +%s) - T0 )) s"
# (2) phase clocks (trace builds; v11 does not spill there), alternating, 2 rounds
for k in 1 2; do for v in tr_base tr_m4; do
  for sh in 4,16,2048,128 2,16,8192,128; do
    n=$(echo $sh | tr , _)
    SAGE_TRACE=1 $D/$v/ablate-attention-bench --impl sage --shape $sh --causal no --sage-bwd-variant 3518392 > $R/trace/${v}_${n}_$k.txt 2>&1
  done
done; done
grep -h -A12 "trace bwd phases" $R/trace/*_1.txt | head -60
echo "trace $(( $(date +%s) - T0 )) s"
cd $OUT && tar -czf r.tgz r && rm -rf r
