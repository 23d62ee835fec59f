ROOT=$PWD; cd .gpu/c9 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
# The GPT-2 small training shape (B16 H12 N1024 d64 causal): cuDNN's kernels and ours, one
# launch each, the sections of calls 4-5 plus the opcode mix (call 6).
SEC="--section LaunchStats --section Occupancy --section SpeedOfLight --section SchedulerStats --section WarpStateStats --section ComputeWorkloadAnalysis --metrics sass__inst_executed_per_opcode --print-metric-instances details"
timeout 150 ncu --profile-from-start off $SEC python3 .gpu/c9/sdpa_one.py 16,12,1024,64 cudnn yes > $R/ncu_cudnn_train.txt 2>&1
echo "cudnn $(( $(date +%s) - T0 )) s"
for k in SageForwardKernelV5 SageBackwardKernel QuantizeKernel DqFinalizeKernel KMeanPartKernel; do
  timeout 100 ncu -k regex:$k --launch-skip 2 --launch-count 1 $SEC $D/bin/ablate-attention-bench --impl sage --shape 16,12,1024,64 --causal yes --iters 3 --warmup 1 > $R/ncu_sage_train_$k.txt 2>&1
done
echo "sage $(( $(date +%s) - T0 )) s"
grep -hE "^  [a-zA-Z_].*\(|Duration|Executed Instructions  " $R/ncu_*.txt | cut -c1-150
cd $OUT && tar -czf r.tgz r && rm -rf r
