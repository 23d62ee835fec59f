ROOT=$PWD; cd .gpu/c6 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
# Instruction mix (executed warp instructions per SASS opcode) and pipe utilization of cuDNN's
# backward kernel and ours, B4 H16 N2048 d128 non-causal, one launch each.
M="--metrics sass__inst_executed_per_opcode --print-metric-instances details --section ComputeWorkloadAnalysis --print-details all"
timeout 150 ncu --profile-from-start off -k regex:bprop $M python3 .gpu/c6/sdpa_one.py 4,16,2048,128 cudnn no > $R/mix_cudnn_bwd.txt 2>&1
echo "cudnn $(( $(date +%s) - T0 )) s"
timeout 120 ncu -k regex:SageBackwardKernel --launch-skip 1 --launch-count 1 $M $D/bin/ablate-attention-bench --impl sage --shape 4,16,2048,128 --causal no --iters 3 --warmup 1 > $R/mix_sage_bwd.txt 2>&1
echo "sage $(( $(date +%s) - T0 )) s"
timeout 150 ncu --profile-from-start off -k regex:fprop $M python3 .gpu/c6/sdpa_one.py 4,16,2048,128 cudnn no > $R/mix_cudnn_fwd.txt 2>&1
timeout 120 ncu -k regex:SageForwardKernelV5 --launch-skip 1 --launch-count 1 $M $D/bin/ablate-attention-bench --impl sage --shape 4,16,2048,128 --causal no --iters 3 --warmup 1 > $R/mix_sage_fwd.txt 2>&1
echo "fwd $(( $(date +%s) - T0 )) s"
head -c 3000 $R/mix_cudnn_bwd.txt
cd $OUT && tar -czf r.tgz r && rm -rf r
