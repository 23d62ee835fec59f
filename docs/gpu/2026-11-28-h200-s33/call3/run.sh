ROOT=$PWD; cd .gpu/s33c3 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
# aa15dd9: the coupled Newton iteration's symmetrization in two launches. Its new test on the
# binary built before the fix (expected to fail: 80000 blocks in gridDim.z) ...
LD_LIBRARY_PATH=$D/lib timeout 300 $D/bin/optim_gpu_test_old --gtest_filter='BatchedPsiTest.*' > $R/optim_old.log 2>&1
echo "optim_gpu_test before the fix rc=$?"; grep -E "OK \]|FAILED|Failure|INTERNAL|Which is|rel" $R/optim_old.log | head -12
# ... then every GPU test binary on the final tree (skipped with SUITE=0).
[ "${SUITE:-1}" = 0 ] || { bash kernels/bench/gpu_suite.sh $D/bin $R; echo "suite rc=$?"; }
echo "tests $(( $(date +%s) - T0 )) s"
cd $OUT && tar -czf r.tgz r && rm -rf r
