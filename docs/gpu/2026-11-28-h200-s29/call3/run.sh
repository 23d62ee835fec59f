ROOT=$PWD; cd .gpu/c3 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R/ab
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
# kBwdFuseDq's parts: count = each CTA drains its dQ adds and counts itself into its head's
# counter after its dK / dV stores, no conversion (DqFinalizeKernel still runs: base/bench_count
# built with ABLATE_SAGE_FUSE_COUNT_ONLY=1); fused = the conversion by each head's last CTA
# (bin/); prod = production (bin/, default variant). Alternating, 3 rounds.
for k in 1 2 3; do
  for sc in 4,16,2048,128:no:24489912 4,16,2048,128:yes:33009592 2,16,8192,128:no:24489912 16,12,1024,64:yes:19115960 8,16,1024,64:no:18984888; do
    IFS=: read sh c v <<< "$sc"; n=${sh//,/_}_${c}_$k
    timeout 60 $D/base/bench_count --impl sage --shape $sh --causal $c --sage-bwd-variant $v --json $R/ab/count_$n.json > /dev/null 2>&1
    timeout 60 $D/bin/ablate-attention-bench --impl sage --shape $sh --causal $c --json $R/ab/prod_$n.json > /dev/null 2>&1
    timeout 60 $D/bin/ablate-attention-bench --impl sage --shape $sh --causal $c --sage-bwd-variant $v --json $R/ab/fused_$n.json > /dev/null 2>&1
  done
  echo "round $k $(( $(date +%s) - T0 )) s"
done
python3 kernels/bench/ab.py --new $R/ab/count_*.json --base $R/ab/prod_*.json --title "count only (new) vs production (base)" > $R/ab_count.md 2>&1
python3 kernels/bench/ab.py --new $R/ab/fused_*.json --base $R/ab/prod_*.json --title "fused conversion (new) vs production (base)" > $R/ab_fused.md 2>&1
grep -E "\| (bwd|fwd\+bwd) \|" $R/ab_count.md $R/ab_fused.md
echo "done $(( $(date +%s) - T0 )) s"
cd $OUT && tar -czf r.tgz r && rm -rf r
