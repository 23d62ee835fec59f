ROOT=$PWD; cd .gpu/c5 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
# Lab timeline (ABLATE_SAGE_TRACE build): per-CTA means and the backward's phase clocks over N
# at 16384 tokens (H16 d128); non-causal with v11 (3518392: production's v12 spills in this
# build), causal with production (16232376).
for sh in 16,16,1024,128 8,16,2048,128 4,16,4096,128 2,16,8192,128 1,16,16384,128; do
  SAGE_TRACE=1 timeout 60 $D/bin/ablate-attention-bench --impl sage --shape $sh --causal no --sage-bwd-variant 3518392 --json /tmp/t.json > $R/trace_nc_${sh//,/_}.txt 2>&1
  SAGE_TRACE=1 timeout 60 $D/bin/ablate-attention-bench --impl sage --shape $sh --causal yes --json /tmp/t.json > $R/trace_c_${sh//,/_}.txt 2>&1
done
grep -H "trace" $R/trace_*.txt | head -40
echo "done $(( $(date +%s) - T0 )) s"
cd $OUT && tar -czf r.tgz r && rm -rf r
