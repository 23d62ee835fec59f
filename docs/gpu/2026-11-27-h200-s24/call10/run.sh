ROOT=$PWD; cd .gpu/c10 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R/ab $R/live
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
for c in 0 1; do
  F=_ZN6ablate7kernels43_GLOBAL__N__2d541504_10_sagebwd_cu_f49c813718SageBackwardKernelILi128ELb${c}ELi7712696EEEvNS1_9BwdParamsE
  for v in base m7 m8 m9; do
    mkdir -p /tmp/x_$v && (cd /tmp/x_$v && cuobjdump -xelf sagebwd.sm_90a.cubin $D/$v/ablate-attention-bench > /dev/null)
    IDX=$(cuobjdump -elf /tmp/x_$v/sagebwd.sm_90a.cubin | awk -v f="$F" '/section .symtab/{s=1} s && $NF==f {print $1; exit}')
    nvdisasm -lrm count -fun $((IDX)) /tmp/x_$v/sagebwd.sm_90a.cubin > /tmp/lr_${v}_$c.txt
    echo "$v c$c S2R_TID $(grep -c 'S2R R[0-9]*, SR_TID.X' /tmp/lr_${v}_$c.txt) STL $(grep -c ' STL' /tmp/lr_${v}_$c.txt) $(python3 .gpu/c10/sass_live.py /tmp/lr_${v}_$c.txt --function ELb${c}ELi7712696 | head -1)" >> $R/live/counts.txt
    python3 .gpu/c10/sass_live.py /tmp/lr_${v}_$c.txt --function ELb${c}ELi7712696 --top 5 > $R/live/chunks_${v}_$c.txt 2>&1
  done
done
cat $R/live/counts.txt
for v in m7 m9 m8; do
  SAGE_BWD_LAB=1 $D/$v/sagebwd_gpu_test > $R/sagebwd_gpu_test_$v.log 2>&1; echo "$v sagebwd (bwd lab) rc=$?" >> $R/suite.txt
  [ $(( $(date +%s) - T0 )) -gt 200 ] && break
done
cat $R/suite.txt; echo "tests $(( $(date +%s) - T0 )) s"
for k in 1 2 3 4 5; do for v in base m7 m8 m9; do
  [ $(( $(date +%s) - T0 )) -gt 500 ] && break 2
  $D/$v/ablate-attention-bench --impl sage --json $R/ab/${v}_$k.json > /dev/null 2>&1
  $D/$v/ablate-attention-bench --impl sage --shape 16,12,1024,64 --causal yes --json $R/ab/${v}t_$k.json > /dev/null 2>&1
done; done
for v in m7 m8 m9; do python3 kernels/bench/ab.py --new $R/ab/${v}_*.json $R/ab/${v}t_*.json --base $R/ab/base_*.json $R/ab/baset_*.json --title "$v vs 1234a30" > $R/ab_$v.md; done
grep -E "bwd \|" $R/ab_m7.md $R/ab_m8.md $R/ab_m9.md | awk -F'|' '{print $1, $3, $4, $5, $9}'
echo "done $(( $(date +%s) - T0 )) s"
cd $OUT && tar -czf r.tgz r && rm -rf r
