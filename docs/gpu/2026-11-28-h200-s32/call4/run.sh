ROOT=$PWD; cd .gpu/s32c4 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
# Which pipe and which memory path is closest to its limit: Nsight Compute's compute and memory
# workload sections (pipe utilization, shared-memory wavefronts and bank conflicts) for our
# backward kernel (HEAD), B4 H16 N2048 d128 non-causal, and cuDNN's beside it.
SEC="--section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section InstructionStats --section SpeedOfLight --print-details all"
MET="--metrics sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_fmaheavy.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_uniform.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_shared_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_cmd_read.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_cmd_write.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,smsp__inst_executed.sum,sm__cycles_elapsed.avg,l1tex__throughput.avg.pct_of_peak_sustained_active"
timeout 200 ncu -k regex:SageBackwardKernel --launch-skip 1 --launch-count 1 $SEC $MET $D/bin/bench-head --impl sage --shape 4,16,2048,128 --causal no --iters 3 --warmup 1 > $R/ncu_sage_bwd.txt 2>&1
echo "sage $(( $(date +%s) - T0 )) s"
timeout 200 ncu --profile-from-start off -k regex:bprop $SEC $MET python3 .gpu/s32c4/sdpa_one.py 4,16,2048,128 cudnn no > $R/ncu_cudnn_bwd.txt 2>&1
echo "cudnn $(( $(date +%s) - T0 )) s"
grep -E "pct_of_peak|wavefronts|bank_conflicts|inst_executed.sum|cycles_elapsed|Shared|Issue Slots|highest" $R/ncu_sage_bwd.txt | head -40
grep -E "pct_of_peak|wavefronts|bank_conflicts|inst_executed.sum|cycles_elapsed|highest" $R/ncu_cudnn_bwd.txt | head -30
cd $OUT && tar -czf r.tgz r && rm -rf r
