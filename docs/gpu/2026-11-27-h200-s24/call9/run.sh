ROOT=$PWD; cd .gpu/c9 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R/ab $R/live
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
for c in 0 1; do
  F=_ZN6ablate7kernels43_GLOBAL__N__2d541504_10_sagebwd_cu_f49c813718SageBackwardKernelILi128ELb${c}ELi7712696EEEvNS1_9BwdParamsE
  for v in base d1 d2; do
    mkdir -p /tmp/x_$v && (cd /tmp/x_$v && cuobjdump -xelf sagebwd.sm_90a.cubin $D/$v/ablate-attention-bench > /dev/null)
    IDX=$(cuobjdump -elf /tmp/x_$v/sagebwd.sm_90a.cubin | awk -v f="$F" '/section .symtab/{s=1} s && $NF==f {print $1; exit}')
    nvdisasm -lrm narrow -fun $((IDX)) /tmp/x_$v/sagebwd.sm_90a.cubin > /tmp/lr_${v}_$c.txt
    LO=$(grep -m1 -o '/\*[0-9a-f]*\*/ *BAR.SYNC.DEFER_BLOCKING R[0-9]*, 0x80\|/\*[0-9a-f]*\*/ *@!P[0-9] BAR.SYNC.DEFER_BLOCKING 0x1, 0x80' /tmp/lr_${v}_$c.txt | head -1 | grep -o '[0-9a-f]\{4,\}')
    echo "$v c$c S2R_TID $(grep -c 'S2R R[0-9]*, SR_TID.X' /tmp/lr_${v}_$c.txt) STL $(grep -c ' STL' /tmp/lr_${v}_$c.txt)" >> $R/live/counts.txt
    python3 .gpu/c9/sass_live.py /tmp/lr_${v}_$c.txt --function ELb${c}ELi7712696 --top 5 > $R/live/chunks_${v}_$c.txt 2>&1
  done
done
cat $R/live/counts.txt
$D/d2/sagebwd_gpu_test > $R/sagebwd_gpu_test_d2.log 2>&1; echo "d2 sagebwd rc=$?" >> $R/suite.txt
$D/d1/sagebwd_gpu_test > $R/sagebwd_gpu_test_d1.log 2>&1; echo "d1 sagebwd rc=$?" >> $R/suite.txt
cat $R/suite.txt; echo "tests $(( $(date +%s) - T0 )) s"
for k in 1 2 3 4 5; do for v in base d1 d2; do
  $D/$v/ablate-attention-bench --impl sage --json $R/ab/${v}_$k.json > /dev/null 2>&1
done; done
for v in d1 d2; do python3 kernels/bench/ab.py --new $R/ab/${v}_*.json --base $R/ab/base_*.json --title "$v vs 1234a30" > $R/ab_$v.md; done
grep -E "bwd \|" $R/ab_d1.md $R/ab_d2.md | awk -F'|' '{print $1, $3, $4, $5, $9}'
echo "done $(( $(date +%s) - T0 )) s"
cd $OUT && tar -czf r.tgz r && rm -rf r
