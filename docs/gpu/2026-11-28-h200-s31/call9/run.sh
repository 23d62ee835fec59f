ROOT=$PWD; cd .gpu/c9 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
# Instructions per (query, key) pair of the final backward kernel beside HEAD-at-start's and
# cuDNN's, B4 H16 N2048 d128 non-causal, one launch each (as session 29's call 6).
M="--metrics sass__inst_executed_per_opcode --print-metric-instances details"
for b in ablate-attention-bench bench-base; do
  timeout 120 ncu -k regex:SageBackwardKernel --launch-skip 1 --launch-count 1 $M $D/bin/$b --impl sage --shape 4,16,2048,128 --causal no --iters 3 --warmup 1 > $R/mix_$b.txt 2>&1
done
timeout 150 ncu --profile-from-start off -k regex:bprop $M python3 kernels/bench/sdpa_one.py 4,16,2048,128 cudnn no > $R/mix_cudnn.txt 2>&1
python3 kernels/bench/ncu_mix.py --pairs 4,16,2048 $R/mix_cudnn.txt:bprop $R/mix_bench-base.txt:SageBackwardKernel $R/mix_ablate-attention-bench.txt:SageBackwardKernel > $R/mix.md 2>&1
head -30 $R/mix.md
echo "done $(( $(date +%s) - T0 )) s"
cd $OUT && tar -czf r.tgz r && rm -rf r
