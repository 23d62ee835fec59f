ROOT=$PWD; cd .gpu/c9 && tar -xJf bundle.tar.xz && B=$PWD/bundle/bin && cd $ROOT
R=$OUT/r; mkdir -p $R
nvidia-smi -L > $R/nvidia-smi-L.txt
cuobjdump -sass $B/ablate-attention-bench | awk '/Function :/{p=($0 ~ /SageBackwardKernelILi128ELb0ELi7712696E/)} p' > $R/bwd.sass
BENCH="$B/ablate-attention-bench --impl sage --causal no --iters 3 --warmup 1"
ncu --clock-control none --section SourceCounters --section WarpStateStats --section SchedulerStats --import-source yes -o /tmp/bwd -k regex:SageBackwardKernel --launch-skip 1 --launch-count 1 $BENCH --shape 2,16,8192,128 > $R/ncu_bwd.log 2>&1
ncu -i /tmp/bwd.ncu-rep --page source --csv --print-source sass 2>&1 | gzip > $R/bwd_src_sass.csv.gz
ncu -i /tmp/bwd.ncu-rep --page details > $R/bwd_details.txt 2>&1
python3 kernels/bench/sass_ctrl.py $R/bwd.sass $R/bwd_src_sass.csv.gz --function 7712696 --per 2097152 > $R/sass_ctrl_bwd.txt 2>&1
python3 kernels/bench/ncu_stalls.py $R/bwd_src_sass.csv.gz --top 25 > $R/ncu_stalls_bwd.txt 2>&1
head -30 $R/sass_ctrl_bwd.txt; grep -A7 "Scheduler Statistics" $R/bwd_details.txt | tail -5
gzip $R/bwd.sass
cd $OUT && tar -czf r.tgz r && rm -rf r
