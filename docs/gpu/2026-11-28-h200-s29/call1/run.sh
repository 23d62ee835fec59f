ROOT=$PWD; cd .gpu/c1 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R/ab
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
timeout 240 $D/bin/sagebwd_gpu_test > $R/sagebwd_gpu_test.log 2>&1; echo "sagebwd_gpu_test rc=$?" > $R/suite.txt
grep -E "PASSED|FAILED" $R/sagebwd_gpu_test.log | tail -3 >> $R/suite.txt; cat $R/suite.txt
echo "tests $(( $(date +%s) - T0 )) s"
# Head order of the launches around the kernels: 11 = both reversed (new, bin/), 00 = HEAD's
# order, 10 = the K / V quantize only, 01 = the dQ conversion only; alternating.
B() { if [ $1 = 11 ]; then echo $D/bin/ablate-attention-bench; else echo $D/base/bench_$1; fi; }
for k in 1 2 3; do
  for sc in 4,16,2048,128:no 4,16,2048,128:yes 2,16,8192,128:no 16,12,1024,64:yes 8,16,1024,64:no; do
    sh=${sc%:*}; c=${sc#*:}; n=${sh//,/_}_${c}_$k
    for v in 11 00 10 01; do
      timeout 60 $(B $v) --impl sage --shape $sh --causal $c --json $R/ab/v${v}_$n.json > /dev/null 2>&1
    done
  done
  echo "round $k $(( $(date +%s) - T0 )) s"
done
for v in 10 01 00; do
  python3 kernels/bench/ab.py --new $R/ab/v11_*.json --base $R/ab/v${v}_*.json --title "SageBwd: both reversed (new) vs $v (base)" > $R/ab_11_vs_$v.md 2>&1
done
python3 kernels/bench/ab.py --new $R/ab/v10_*.json --base $R/ab/v00_*.json --title "quantize reversed (new) vs HEAD (base)" > $R/ab_10_vs_00.md 2>&1
python3 kernels/bench/ab.py --new $R/ab/v01_*.json --base $R/ab/v00_*.json --title "dQ conversion reversed (new) vs HEAD (base)" > $R/ab_01_vs_00.md 2>&1
grep -E "\| (fwd|bwd|fwd\+bwd) \|" $R/ab_11_vs_00.md
echo "ab $(( $(date +%s) - T0 )) s"
# In place: the auxiliary launches' durations, HEAD's order and both reversed.
for v in 00 11; do
  for sc in 4,16,2048,128:no 16,12,1024,64:yes; do
    sh=${sc%:*}; c=${sc#*:}
    timeout 90 ncu -k 'regex:Quantize|KMean|DqFinal' --cache-control none --clock-control none --metrics gpu__time_duration.sum --csv --page raw $(B $v) --impl sage --shape $sh --causal $c --iters 20 --warmup 1 > $R/ncu_${v}_${sh//,/_}_$c.csv 2>/dev/null
    python3 kernels/bench/ncu_durations.py --split 21 $R/ncu_${v}_${sh//,/_}_$c.csv > $R/ncu_durations_${v}_${sh//,/_}_$c.txt 2>&1
  done
done
head -50 $R/ncu_durations_*.txt
rm -f $R/*.csv
echo "done $(( $(date +%s) - T0 )) s"
cd $OUT && tar -czf r.tgz r && rm -rf r
