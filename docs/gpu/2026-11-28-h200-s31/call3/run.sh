ROOT=$PWD; cd .gpu/c3 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
timeout 200 $D/bin/sagebwd_gpu_test > $R/sagebwd_gpu_test.log 2>&1; echo "sagebwd_gpu_test rc=$?"; grep -E "PASSED|FAILED" $R/sagebwd_gpu_test.log | tail -3
echo "test $(( $(date +%s) - T0 )) s"
# A/B: the dQ bulk reduction's proxy fence after the next wgmma's issue (new) vs HEAD (base),
# alternating, four rounds, SageBwd only.
for k in 1 2 3 4; do
  for s in 4,16,2048,128 2,16,8192,128; do for c in no yes; do
    timeout 60 $D/bin/ablate-attention-bench --impl sage --shape $s --causal $c --json $R/new_${k}_${s}_$c.json > /dev/null 2>&1
    timeout 60 $D/bin/bench-base --impl sage --shape $s --causal $c --json $R/base_${k}_${s}_$c.json > /dev/null 2>&1
  done; done
done
echo "ab $(( $(date +%s) - T0 )) s"
python3 kernels/bench/ab.py --new $R/new_*.json --base $R/base_*.json --title "dQ send after the next issue vs HEAD" > $R/ab.md
cat $R/ab.md
cd $OUT && tar -czf r.tgz r && rm -rf r
