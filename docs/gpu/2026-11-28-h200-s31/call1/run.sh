ROOT=$PWD; cd .gpu/c1 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R
nvidia-smi -L > $R/nvidia-smi-L.txt
ncu --version > $R/ncu_version.txt 2>&1
T0=$(date +%s)
# Where the backward's warps wait: PC sampling per SASS instruction (SourceCounters) and the
# stall reasons (WarpStateStats), one launch, B4 H16 N2048 d128 non-causal; cuDNN's beside it.
SEC="--section WarpStateStats --section SourceCounters --section SchedulerStats --print-details all"
timeout 150 ncu -k regex:SageBackwardKernel --launch-skip 1 --launch-count 1 $SEC --import-source yes -o $R/sage_bwd $D/bin/ablate-attention-bench --impl sage --shape 4,16,2048,128 --causal no --iters 3 --warmup 1 > $R/ncu_sage_log.txt 2>&1
echo "sage $(( $(date +%s) - T0 )) s"
timeout 60 ncu -i $R/sage_bwd.ncu-rep --page details --print-details all > $R/sage_bwd_details.txt 2>&1
timeout 60 ncu -i $R/sage_bwd.ncu-rep --page source --csv --print-source sass > $R/sage_bwd_sass.csv 2>&1
timeout 60 ncu -i $R/sage_bwd.ncu-rep --page source --csv --print-source cuda --source-folders $ROOT > $R/sage_bwd_cuda.csv 2>&1
echo "export $(( $(date +%s) - T0 )) s"
timeout 150 ncu --profile-from-start off -k regex:bprop $SEC -o $R/cudnn_bwd python3 .gpu/c1/sdpa_one.py 4,16,2048,128 cudnn no > $R/ncu_cudnn_log.txt 2>&1
timeout 60 ncu -i $R/cudnn_bwd.ncu-rep --page details --print-details all > $R/cudnn_bwd_details.txt 2>&1
timeout 60 ncu -i $R/cudnn_bwd.ncu-rep --page source --csv --print-source sass > $R/cudnn_bwd_sass.csv 2>&1
echo "cudnn $(( $(date +%s) - T0 )) s"
ls -la $R
head -c 1500 $R/sage_bwd_sass.csv; echo; grep -n -i "stall\|cycles" $R/sage_bwd_details.txt | head -40
rm -f $R/*.ncu-rep.bak
cd $OUT && tar -czf r.tgz r && rm -rf r
