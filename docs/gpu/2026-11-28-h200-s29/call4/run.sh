ROOT=$PWD; cd .gpu/c4 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
SEC="--section LaunchStats --section Occupancy --section SpeedOfLight --section SchedulerStats --section WarpStateStats --section ComputeWorkloadAnalysis --section InstructionStats --section MemoryWorkloadAnalysis"
# cuDNN's (and FA2's) kernels beside ours, one launch each, the same sections (clocks locked by ncu).
for c in no yes; do
  timeout 150 ncu --profile-from-start off $SEC python3 .gpu/c4/sdpa_one.py 4,16,2048,128 cudnn $c > $R/ncu_cudnn_$c.txt 2>&1
  echo "cudnn $c $(( $(date +%s) - T0 )) s"
  timeout 120 ncu -k regex:'SageBackwardKernel|SageForwardKernelV5' --launch-skip 4 --launch-count 4 $SEC $D/bin/ablate-attention-bench --impl sage --shape 4,16,2048,128 --causal $c --iters 3 --warmup 1 > $R/ncu_sage_$c.txt 2>&1
  echo "sage $c $(( $(date +%s) - T0 )) s"
done
timeout 150 ncu --profile-from-start off $SEC python3 .gpu/c4/sdpa_one.py 4,16,2048,128 flash no > $R/ncu_flash_no.txt 2>&1
echo "flash $(( $(date +%s) - T0 )) s"
grep -E "^  [a-zA-Z_].*\(|Duration|Registers Per|Block Size|Grid Size|Dynamic Shared|Achieved Active Warps|Issued Warp Per Scheduler|No Eligible|Executed Ipc A|Executed Instructions  " $R/ncu_cudnn_no.txt | head -60
cd $OUT && tar -czf r.tgz r && rm -rf r
