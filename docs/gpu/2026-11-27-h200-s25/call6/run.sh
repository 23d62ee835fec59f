ROOT=$PWD; cd .gpu/c6 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R/ab $R/sass
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
( cd $R/sass && cuobjdump -xelf all $D/bin/ablate-attention-bench > /dev/null 2>&1
  C=$(grep -l SageBackwardKernel *.cubin | head -1)
  for V in 16101304 32878520 66432952 7712696; do
    F=_ZN6ablate7kernels43_GLOBAL__N__2d541504_10_sagebwd_cu_f49c813718SageBackwardKernelILi128ELb0ELi${V}EEEvNS1_9BwdParamsE
    IDX=$(cuobjdump -elf $C | awk -v f="$F" '/section .symtab/{s=1} s && $NF==f {print $1; exit}')
    nvdisasm -lrm count -fun $((IDX)) $C > live_$V.txt 2>&1
    python3 $ROOT/kernels/bench/sass_live.py --function $F live_$V.txt --top 25 > top_$V.txt 2>&1
  done; rm -f *.cubin )
SAGE_BWD_LAB=1 SAGE_BWD_LAB_VARS=7712696,16101304,32878520,66432952,7843768,16232376,33009592,66564024 $D/bin/sagebwd_gpu_test --gtest_filter='*BwdVariantLab*' > $R/lab.log 2>&1; echo "lab rc=$?"; grep -E "PASSED|FAILED|Failure" $R/lab.log | head
echo "lab $(( $(date +%s) - T0 )) s"
for k in 1 2 3 4; do for sh in 4,16,2048,128 2,16,8192,128; do
  for pair in "base 7712696 7843768" "swap 16101304 16232376" "dv0 32878520 33009592" "dk0 66432952 66564024"; do
    set -- $pair
    $D/bin/ablate-attention-bench --impl sage --shape $sh --causal no --sage-bwd-variant $2 --json $R/ab/$1_n${sh//,/_}_$k.json > /dev/null 2>&1
    $D/bin/ablate-attention-bench --impl sage --shape $sh --causal yes --sage-bwd-variant $3 --json $R/ab/$1_c${sh//,/_}_$k.json > /dev/null 2>&1
  done
done; done
python3 kernels/bench/ab.py --new $R/ab/swap_*.json --base $R/ab/base_*.json --title "swap (16101304 / 16232376) vs production (7712696 / 7843768)" > $R/ab_swap.md 2>&1
python3 kernels/bench/ab.py --new $R/ab/dv0_*.json --base $R/ab/base_*.json --title "swap + dV0 beside the chain (32878520 / 33009592) vs production" > $R/ab_dv0.md 2>&1
python3 kernels/bench/ab.py --new $R/ab/dv0_*.json --base $R/ab/swap_*.json --title "swap + dV0 vs swap" > $R/ab_dv0_swap.md 2>&1
python3 kernels/bench/ab.py --new $R/ab/dk0_*.json --base $R/ab/base_*.json --title "swap + dV0 + dK0 beside the chain (66432952 / 66564024) vs production" > $R/ab_dk0.md 2>&1
python3 kernels/bench/ab.py --new $R/ab/dk0_*.json --base $R/ab/dv0_*.json --title "swap + dV0 + dK0 vs swap + dV0" > $R/ab_dk0_dv0.md 2>&1
for f in ab_swap ab_dv0 ab_dv0_swap ab_dk0 ab_dk0_dv0; do echo $f; grep -E "\| bwd \|" $R/$f.md | awk -F'|' '{print $3, $4, $9}'; done
echo "done $(( $(date +%s) - T0 )) s"
cd $OUT && tar -czf r.tgz r && rm -rf r
