ROOT=$PWD; cd .gpu/c7 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R
nvidia-smi -L > $R/nvidia-smi-L.txt
# Phase clocks (trace build): v11 (3518392, production's structure without the early phase 1;
# production 7712696 spills in this build), keys as rows without / with dV0 beside the chain.
for sh in 2,16,8192,128 4,16,2048,128; do
  for v in 3518392 16101304 32878520; do
    echo "== shape $sh non-causal variant $v" >> $R/trace.txt
    SAGE_TRACE=1 $D/bin/ablate-attention-bench --impl sage --shape $sh --causal no --sage-bwd-variant $v >> $R/trace.txt 2>&1
  done
done
grep -E "==|trace bwd phases|  [0-9]" $R/trace.txt | head -80
cd $OUT && tar -czf r.tgz r && rm -rf r
