ROOT=$PWD; cd .gpu/c3 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R/ab $R/sass
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
for v in m4 bin; do
  for c in 0; do
    cuobjdump -sass $D/$v/ablate-attention-bench | awk -v pat="SageBackwardKernelILi128ELb${c}ELi7712696E" '/Function :/{p=($0 ~ pat)} p' > $R/sass/${v}_c$c.sass
  done
done
$D/m4/sagebwd_gpu_test > $R/sagebwd_gpu_test_m4.log 2>&1; echo "m4 sagebwd rc=$?" >> $R/suite.txt
cat $R/suite.txt; echo "tests done $(( $(date +%s) - T0 )) s"
for k in 1 2 3 4 5 6; do for v in base m4 bin; do
  [ $(( $(date +%s) - T0 )) -gt 480 ] && break 2
  $D/$v/ablate-attention-bench --impl sage --json $R/ab/${v}_$k.json > /dev/null 2>&1
  $D/$v/ablate-attention-bench --impl sage --shape 16,12,1024,64 --causal yes --json $R/ab/${v}t_$k.json > /dev/null 2>&1
done; echo "round $k $(( $(date +%s) - T0 )) s"; done
python3 kernels/bench/ab.py --new $R/ab/m4_*.json $R/ab/m4t_*.json --base $R/ab/base_*.json $R/ab/baset_*.json --title "M4: column inverse scales loaded two blocks ahead vs 1234a30" > $R/ab_m4.md
python3 kernels/bench/ab.py --new $R/ab/bin_*.json $R/ab/bint_*.json --base $R/ab/base_*.json $R/ab/baset_*.json --title "M5: four blocks ahead vs 1234a30" > $R/ab_m5.md
grep -E "bwd \|" $R/ab_m4.md $R/ab_m5.md | awk -F'|' '{print $1, $3, $4, $5, $9}'
cd $OUT && tar -czf r.tgz r && rm -rf r
