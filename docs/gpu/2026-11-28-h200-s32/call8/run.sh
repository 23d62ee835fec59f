ROOT=$PWD; cd .gpu/s32c8 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
# The final tree: every GPU test binary (the ctest label gpu) by the new suite tool
bash kernels/bench/gpu_suite.sh $D/bin $R; echo "suite rc=$?"
echo "tests $(( $(date +%s) - T0 )) s"
cd $OUT && tar -czf r.tgz r && rm -rf r
