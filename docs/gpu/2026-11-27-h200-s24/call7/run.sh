ROOT=$PWD; cd .gpu/c7 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R/ab $R/sass
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
for v in e1 e2 e3; do for c in 0 1; do
  cuobjdump -sass $D/$v/ablate-attention-bench | awk -v pat="SageBackwardKernelILi128ELb${c}ELi7712696E" '/Function :/{p=($0 ~ pat)} p' > $R/sass/${v}_c$c.sass
  echo "$v c$c S2R_TID $(grep -c 'S2R R[0-9]*, SR_TID.X' $R/sass/${v}_c$c.sass) STL $(grep -c STL $R/sass/${v}_c$c.sass) LDL $(grep -c LDL $R/sass/${v}_c$c.sass)" >> $R/sass/counts.txt
done; done
cat $R/sass/counts.txt
$D/e1/sagebwd_gpu_test > $R/sagebwd_gpu_test_e1.log 2>&1; echo "e1 sagebwd rc=$?" >> $R/suite.txt
$D/e3/sagebwd_gpu_test > $R/sagebwd_gpu_test_e3.log 2>&1; echo "e3 sagebwd rc=$?" >> $R/suite.txt
cat $R/suite.txt; echo "tests $(( $(date +%s) - T0 )) s"
for k in 1 2 3 4 5; do for v in base e1 e2 e3; do
  [ $(( $(date +%s) - T0 )) -gt 500 ] && break 2
  $D/$v/ablate-attention-bench --impl sage --json $R/ab/${v}_$k.json > /dev/null 2>&1
done; done
for v in e1 e2 e3; do
  python3 kernels/bench/ab.py --new $R/ab/${v}_*.json --base $R/ab/base_*.json --title "$v vs 1234a30" > $R/ab_$v.md
done
grep -E "bwd \|" $R/ab_e1.md $R/ab_e2.md $R/ab_e3.md | awk -F'|' '{print $1, $3, $4, $5, $9}'
echo "done $(( $(date +%s) - T0 )) s"
cd $OUT && tar -czf r.tgz r && rm -rf r
