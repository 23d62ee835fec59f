ROOT=$PWD; cd .gpu/c2 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R/ab $R/sass
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
for v in m2 bin; do
  for c in 0 1; do
    cuobjdump -sass $D/$v/ablate-attention-bench | awk -v pat="SageBackwardKernelILi128ELb${c}ELi7712696E" '/Function :/{p=($0 ~ pat)} p' > $R/sass/${v}_c$c.sass
    echo "$v c$c lines $(wc -l < $R/sass/${v}_c$c.sass) BSSY $(grep -c BSSY $R/sass/${v}_c$c.sass) STL $(grep -c STL $R/sass/${v}_c$c.sass) LDL $(grep -c LDL $R/sass/${v}_c$c.sass) S2R $(grep -c S2R $R/sass/${v}_c$c.sass)" >> $R/sass/counts.txt
  done
done
cat $R/sass/counts.txt
$D/bin/sagebwd_gpu_test > $R/sagebwd_gpu_test_m3.log 2>&1; echo "m3 sagebwd rc=$?" >> $R/suite.txt
$D/m2/sagebwd_gpu_test > $R/sagebwd_gpu_test_m2.log 2>&1; echo "m2 sagebwd rc=$?" >> $R/suite.txt
cat $R/suite.txt; echo "tests done $(( $(date +%s) - T0 )) s"
for k in 1 2 3 4 5; do for v in base m2 bin; do
  [ $(( $(date +%s) - T0 )) -gt 480 ] && break 2
  $D/$v/ablate-attention-bench --impl sage --json $R/ab/${v}_$k.json > /dev/null 2>&1
  $D/$v/ablate-attention-bench --impl sage --shape 16,12,1024,64 --causal yes --json $R/ab/${v}t_$k.json > /dev/null 2>&1
done; echo "round $k $(( $(date +%s) - T0 )) s"; done
python3 kernels/bench/ab.py --new $R/ab/m2_*.json $R/ab/m2t_*.json --base $R/ab/base_*.json $R/ab/baset_*.json --title "M2: dV / dK coefficients in registers vs 1234a30" > $R/ab_m2.md
python3 kernels/bench/ab.py --new $R/ab/bin_*.json $R/ab/bint_*.json --base $R/ab/base_*.json $R/ab/baset_*.json --title "M3: M2 + column inverse scales loaded two blocks ahead vs 1234a30" > $R/ab_m3.md
python3 kernels/bench/ab.py --new $R/ab/bin_*.json $R/ab/bint_*.json --base $R/ab/m2_*.json $R/ab/m2t_*.json --title "M3 vs M2" > $R/ab_m3_vs_m2.md
grep -E "bwd \|" $R/ab_m2.md $R/ab_m3.md $R/ab_m3_vs_m2.md | awk -F'|' '{print $1, $3, $4, $5, $9}'
cd $OUT && tar -czf r.tgz r && rm -rf r
