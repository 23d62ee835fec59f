set -x
ROOT=$PWD; cd .gpu/c1 && tar -xJf bundle.tar.xz && B=$PWD/bundle/bin && cd $ROOT
R=$OUT/r; mkdir -p $R
nvidia-smi -L > $R/nvidia-smi-L.txt
cuobjdump -sass $B/ablate-attention-bench > /tmp/all.sass 2>&1
grep -n "Function :" /tmp/all.sass > $R/functions.txt
awk '/Function :/{p=($0 ~ /SageBackwardKernelILi128ELb0ELi7712696E/ || $0 ~ /SageForwardKernelV5ILi128ELb0E/)} p' /tmp/all.sass | gzip > $R/sass_sel.txt.gz
BENCH="$B/ablate-attention-bench --impl sage --causal no --iters 3 --warmup 1"
ncu --clock-control none --section SourceCounters --section WarpStateStats --section SchedulerStats --import-source yes -o /tmp/bwd -k regex:SageBackwardKernel --launch-skip 1 --launch-count 1 $BENCH --shape 2,16,8192,128 > $R/ncu_bwd.log 2>&1
ncu -i /tmp/bwd.ncu-rep --page source --csv --print-source cuda,sass 2>&1 | gzip > $R/bwd_src_cuda.csv.gz
ncu -i /tmp/bwd.ncu-rep --page source --csv --print-source sass 2>&1 | gzip > $R/bwd_src_sass.csv.gz
ncu -i /tmp/bwd.ncu-rep --page details > $R/bwd_details.txt 2>&1
ncu --clock-control none --section SourceCounters --section WarpStateStats --section SchedulerStats --import-source yes -o /tmp/fwd -k regex:SageForwardKernelV5 --launch-skip 1 --launch-count 1 $BENCH --shape 4,16,2048,128 > $R/ncu_fwd.log 2>&1
ncu -i /tmp/fwd.ncu-rep --page source --csv --print-source sass 2>&1 | gzip > $R/fwd_src_sass.csv.gz
ncu -i /tmp/fwd.ncu-rep --page details > $R/fwd_details.txt 2>&1
ls -la $R
cd $OUT && tar -czf r.tgz r && rm -rf r
