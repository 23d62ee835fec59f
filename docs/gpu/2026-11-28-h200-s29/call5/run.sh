ROOT=$PWD; cd .gpu/c5 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
SEC="--section LaunchStats --section Occupancy --section SpeedOfLight --section SchedulerStats --section WarpStateStats --section ComputeWorkloadAnalysis --section InstructionStats --section MemoryWorkloadAnalysis"
# Our backward kernel, one launch per mask, the sections of call 4's cuDNN / FA2 profiles.
for c in no yes; do
  timeout 120 ncu -k regex:'SageBackwardKernel' --launch-skip 1 --launch-count 1 $SEC $D/bin/ablate-attention-bench --impl sage --shape 4,16,2048,128 --causal $c --iters 3 --warmup 1 > $R/ncu_sagebwd_$c.txt 2>&1
  echo "sage $c $(( $(date +%s) - T0 )) s"
done
grep -E "^  [a-zA-Z_].*\(|Duration|SM Frequency|Executed Instructions  |Issued Warp Per|Achieved Active Warps|Grid Size  |Registers Per|No Eligible" $R/ncu_sagebwd_*.txt | cut -c1-160
cd $OUT && tar -czf r.tgz r && rm -rf r
