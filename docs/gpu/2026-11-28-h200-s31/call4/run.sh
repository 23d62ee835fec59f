ROOT=$PWD; cd .gpu/c4 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
timeout 200 $D/bin/sagebwd_gpu_test > $R/sagebwd_gpu_test.log 2>&1; echo "sagebwd_gpu_test rc=$?"; grep -E "PASSED|FAILED" $R/sagebwd_gpu_test.log | tail -3
echo "test $(( $(date +%s) - T0 )) s"
# A/B: dQ staged by stmatrix with dqacc's columns permuted (new) vs HEAD (base), alternating,
# four rounds, SageBwd only, the bench's shapes and the GPT-2 small training shape.
for k in 1 2 3 4; do
  for s in 4,16,2048,128 2,16,8192,128 8,16,1024,64; do for c in no yes; do
    timeout 60 $D/bin/ablate-attention-bench --impl sage --shape $s --causal $c --json $R/new_${k}_${s}_$c.json > /dev/null 2>&1
    timeout 60 $D/bin/bench-base --impl sage --shape $s --causal $c --json $R/base_${k}_${s}_$c.json > /dev/null 2>&1
  done; done
  timeout 60 $D/bin/ablate-attention-bench --impl sage --shape 16,12,1024,64 --causal yes --json $R/new_${k}_train.json > /dev/null 2>&1
  timeout 60 $D/bin/bench-base --impl sage --shape 16,12,1024,64 --causal yes --json $R/base_${k}_train.json > /dev/null 2>&1
done
echo "ab $(( $(date +%s) - T0 )) s"
python3 kernels/bench/ab.py --new $R/new_*.json --base $R/base_*.json --title "dQ staged by stmatrix vs HEAD" > $R/ab.md
cat $R/ab.md
# In place: the dQ conversion launch (its loads and stores changed) and the backward kernel.
for b in ablate-attention-bench bench-base; do
  timeout 120 ncu -k 'regex:DqFinal|SageBackwardKernel' --cache-control none --clock-control none --metrics gpu__time_duration.sum --csv --page raw $D/bin/$b --impl sage --shape 4,16,2048,128 --causal no --iters 20 --warmup 1 > $R/ncu_$b.csv 2>&1
  python3 kernels/bench/ncu_durations.py $R/ncu_$b.csv > $R/durations_$b.txt 2>&1; echo "== $b"; cat $R/durations_$b.txt
done
echo "done $(( $(date +%s) - T0 )) s"
cd $OUT && tar -czf r.tgz r && rm -rf r
