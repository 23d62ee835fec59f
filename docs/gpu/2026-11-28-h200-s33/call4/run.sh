ROOT=$PWD; cd .gpu/s33c4 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
# The review's one-launch symmetrization (the final code): every GPU test binary.
bash kernels/bench/gpu_suite.sh $D/bin $R; echo "suite rc=$?"
echo "tests $(( $(date +%s) - T0 )) s"
cd $OUT && tar -czf r.tgz r && rm -rf r
