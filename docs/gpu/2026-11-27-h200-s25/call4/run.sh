ROOT=$PWD; cd .gpu/c4 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R/ab $R/sass
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
# SASS: live registers and spill sites of the swap kernel (and production beside it)
( cd $R/sass && cuobjdump -xelf all $D/bin/ablate-attention-bench > /dev/null 2>&1; ls > cubins.txt
  C=$(grep -l SageBackwardKernel *.cubin | head -1); echo "$C" >> cubins.txt
  for V in 16101304 7712696; do
    F=_ZN6ablate7kernels43_GLOBAL__N__2d541504_10_sagebwd_cu_f49c813718SageBackwardKernelILi128ELb0ELi${V}EEEvNS1_9BwdParamsE
    IDX=$(cuobjdump -elf $C | awk -v f="$F" '/section .symtab/{s=1} s && $NF==f {print $1; exit}')
    nvdisasm -lrm count -fun $((IDX)) $C > live_$V.txt 2>&1
    python3 $ROOT/kernels/bench/sass_live.py --function $F live_$V.txt --top 25 > top_$V.txt 2>&1
    grep -n 'STL\|LDL' live_$V.txt | head -80 > spills_$V.txt
  done; rm -f *.cubin )
echo "sass $(( $(date +%s) - T0 )) s"
SAGE_BWD_LAB=1 SAGE_BWD_LAB_VARS=7712696,16101304,7843768,16232376 $D/bin/sagebwd_gpu_test --gtest_filter='*BwdVariantLab*' > $R/lab.log 2>&1; echo "lab rc=$?"; grep -E "PASSED|FAILED|Failure" $R/lab.log | head
echo "lab $(( $(date +%s) - T0 )) s"
for k in 1 2 3 4 5; do for sh in 4,16,2048,128 2,16,8192,128; do
  $D/bin/ablate-attention-bench --impl sage --shape $sh --causal no --sage-bwd-variant 7712696 --json $R/ab/base_n${sh//,/_}_$k.json > /dev/null 2>&1
  $D/bin/ablate-attention-bench --impl sage --shape $sh --causal no --sage-bwd-variant 16101304 --json $R/ab/new_n${sh//,/_}_$k.json > /dev/null 2>&1
  $D/bin/ablate-attention-bench --impl sage --shape $sh --causal yes --sage-bwd-variant 7843768 --json $R/ab/base_c${sh//,/_}_$k.json > /dev/null 2>&1
  $D/bin/ablate-attention-bench --impl sage --shape $sh --causal yes --sage-bwd-variant 16232376 --json $R/ab/new_c${sh//,/_}_$k.json > /dev/null 2>&1
done; done
python3 kernels/bench/ab.py --new $R/ab/new_*.json --base $R/ab/base_*.json --title "swap (16101304 / 16232376) vs production (7712696 / 7843768)" > $R/ab.md 2>&1
cat $R/ab.md | grep -E "bwd"
echo "done $(( $(date +%s) - T0 )) s"
cd $OUT && tar -czf r.tgz r && rm -rf r
