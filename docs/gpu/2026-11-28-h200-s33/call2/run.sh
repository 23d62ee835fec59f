ROOT=$PWD; cd .gpu/s33c2 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
# d0cbb5e: the planned embedding backward's multi-chunk tokens on gridDim.x. Its new test on the
# binary built before the fix (expected to fail: more than 65535 blocks in gridDim.y) ...
timeout 300 $D/bin/layers_gpu_test_old --gtest_filter='*EncoderBackwardPlanned*' > $R/layers_old.log 2>&1
echo "layers_gpu_test before the fix rc=$?"; grep -E "OK|FAILED|Failure|error" $R/layers_old.log | head -8
# ... then every GPU test binary on the final tree.
bash kernels/bench/gpu_suite.sh $D/bin $R; echo "suite rc=$?"
echo "tests $(( $(date +%s) - T0 )) s"
cd $OUT && tar -czf r.tgz r && rm -rf r
