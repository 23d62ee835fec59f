ROOT=$PWD; cd .gpu/c1 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R/ab $R/sass
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
for v in base m1; do
  for c in 0 1; do
    cuobjdump -sass $D/$v/ablate-attention-bench | awk -v pat="SageBackwardKernelILi128ELb${c}ELi7712696E" '/Function :/{p=($0 ~ pat)} p' > $R/sass/${v}_c$c.sass
    echo "$v c$c lines $(wc -l < $R/sass/${v}_c$c.sass) BSSY $(grep -c BSSY $R/sass/${v}_c$c.sass) BSYNC $(grep -c BSYNC $R/sass/${v}_c$c.sass) BRA $(grep -c ' BRA' $R/sass/${v}_c$c.sass) STL $(grep -c STL $R/sass/${v}_c$c.sass) LDL $(grep -c LDL $R/sass/${v}_c$c.sass)" >> $R/sass/counts.txt
  done
done
cat $R/sass/counts.txt
echo "sass done $(( $(date +%s) - T0 )) s"
$D/bin/sagebwd_gpu_test > $R/sagebwd_gpu_test_m1b.log 2>&1; echo "m1b sagebwd rc=$?" >> $R/suite.txt
$D/m1/sagebwd_gpu_test > $R/sagebwd_gpu_test_m1.log 2>&1; echo "m1 sagebwd rc=$?" >> $R/suite.txt
cat $R/suite.txt; echo "tests done $(( $(date +%s) - T0 )) s"
for k in 1 2 3; do for v in base m1 bin; do
  [ $(( $(date +%s) - T0 )) -gt 480 ] && break 2
  $D/$v/ablate-attention-bench --impl sage --json $R/ab/${v}_$k.json > /dev/null 2>&1
  $D/$v/ablate-attention-bench --impl sage --shape 16,12,1024,64 --causal yes --json $R/ab/${v}t_$k.json > /dev/null 2>&1
done; echo "round $k $(( $(date +%s) - T0 )) s"; done
python3 kernels/bench/ab.py --new $R/ab/m1_*.json $R/ab/m1t_*.json --base $R/ab/base_*.json $R/ab/baset_*.json --title "M1: statistics inside the interior / masked branches vs 1234a30" > $R/ab_m1.md
python3 kernels/bench/ab.py --new $R/ab/bin_*.json $R/ab/bint_*.json --base $R/ab/base_*.json $R/ab/baset_*.json --title "M1b: M1 + predicated dsrow adds in the non-causal d128 kernel vs 1234a30" > $R/ab_m1b.md
grep -E "bwd \|" $R/ab_m1.md $R/ab_m1b.md | awk -F'|' '{print $1, $3, $4, $5, $9}'
cd $OUT && tar -czf r.tgz r && rm -rf r
