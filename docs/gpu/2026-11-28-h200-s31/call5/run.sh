ROOT=$PWD; cd .gpu/c5 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
timeout 200 $D/bin/sagebwd_gpu_test > $R/sagebwd_gpu_test.log 2>&1; echo "sagebwd_gpu_test rc=$?"; grep -E "PASSED|FAILED" $R/sagebwd_gpu_test.log | tail -3
echo "test $(( $(date +%s) - T0 )) s"
# A/B/C: P^T / dS^T codes by stmatrix.trans on top of call 4's dQ staging (new), call 4's binary
# (dq), HEAD (base); alternating, four rounds.
for k in 1 2 3 4; do
  for s in 4,16,2048,128 2,16,8192,128 8,16,1024,64; do for c in no yes; do
    for b in ablate-attention-bench bench-dq bench-base; do
      timeout 60 $D/bin/$b --impl sage --shape $s --causal $c --json $R/${b}_${k}_${s}_$c.json > /dev/null 2>&1
    done
  done; done
  for b in ablate-attention-bench bench-dq bench-base; do
    timeout 60 $D/bin/$b --impl sage --shape 16,12,1024,64 --causal yes --json $R/${b}_${k}_train.json > /dev/null 2>&1
  done
done
echo "ab $(( $(date +%s) - T0 )) s"
python3 kernels/bench/ab.py --new $R/ablate-attention-bench_*.json --base $R/bench-dq_*.json --title "P^T / dS^T by stmatrix (new) vs call 4's dQ staging (base)" > $R/ab_new_vs_dq.md
python3 kernels/bench/ab.py --new $R/ablate-attention-bench_*.json --base $R/bench-base_*.json --title "both vs HEAD" > $R/ab_new_vs_head.md
cat $R/ab_new_vs_dq.md $R/ab_new_vs_head.md | grep -E "bwd|title|vs"
cd $OUT && tar -czf r.tgz r && rm -rf r
