ROOT=$PWD; cd .gpu/c6 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R/ab $R/sass
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
for c in 0 1; do
  cuobjdump -sass $D/m6/ablate-attention-bench | awk -v pat="SageBackwardKernelILi128ELb${c}ELi7712696E" '/Function :/{p=($0 ~ pat)} p' > $R/sass/m6_c$c.sass
  echo "m6 c$c S2R $(grep -c S2R $R/sass/m6_c$c.sass) STL $(grep -c STL $R/sass/m6_c$c.sass)" >> $R/sass/counts.txt
done
cat $R/sass/counts.txt
for k in 1 2 3 4 5 6; do for v in base m6; do
  $D/$v/ablate-attention-bench --impl sage --json $R/ab/${v}_$k.json > /dev/null 2>&1
done; done
python3 kernels/bench/ab.py --new $R/ab/m6_*.json --base $R/ab/base_*.json --title "M6: inv4 one block ahead at d128 (four at d64, as production) vs 1234a30" > $R/ab_m6.md
grep -E "bwd \|" $R/ab_m6.md | awk -F'|' '{print $3, $4, $5, $9}'
echo "done $(( $(date +%s) - T0 )) s"
cd $OUT && tar -czf r.tgz r && rm -rf r
