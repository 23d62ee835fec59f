ROOT=$PWD; cd .gpu/c10 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
# The forward kernel's stall map (as call 1 for the backward), B4 H16 N2048 d128, both masks.
for c in no yes; do
  timeout 150 ncu -k regex:SageForwardKernel --launch-skip 1 --launch-count 1 --section WarpStateStats --section SourceCounters --section SchedulerStats --import-source yes -o $R/sage_fwd_$c $D/bin/ablate-attention-bench --impl sage --shape 4,16,2048,128 --causal $c --iters 3 --warmup 1 > $R/ncu_fwd_log_$c.txt 2>&1
  timeout 60 ncu -i $R/sage_fwd_$c.ncu-rep --page source --csv --print-source sass | gzip -9 > $R/sage_fwd_${c}_sass.csv.gz
  timeout 60 ncu -i $R/sage_fwd_$c.ncu-rep --page details > $R/sage_fwd_${c}_details.txt 2>&1
  rm -f $R/sage_fwd_$c.ncu-rep
  python3 kernels/bench/ncu_stalls.py $R/sage_fwd_${c}_sass.csv.gz --top 30 > $R/stalls_sage_fwd_$c.txt 2>&1
done
echo "done $(( $(date +%s) - T0 )) s"
head -14 $R/stalls_sage_fwd_no.txt
cd $OUT && tar -czf r.tgz r && rm -rf r
