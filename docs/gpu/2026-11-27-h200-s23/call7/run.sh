ROOT=$PWD; cd .gpu/c7 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R/ab
nvidia-smi -L > $R/nvidia-smi-L.txt
SAGE_BWD_LAB=1 SAGE_FWD_LAB=1 $D/bin/sagebwd_gpu_test > $R/sagebwd_gpu_test_labs.log 2>&1; echo "sagebwd rc=$?" >> $R/suite.txt
tail -2 $R/sagebwd_gpu_test_labs.log
cuobjdump -sass $D/sass/bench | awk '/Function :/{p=($0 ~ /SageBackwardKernelILi128ELb[01]ELi(7712696|7843768)E/)} p' > $R/bwd_u2.sass
grep -c "ELECT" $R/bwd_u2.sass
for k in 1 2 3 4; do
  for v in bin base h c4; do
    $D/$v/ablate-attention-bench --impl sage --json $R/ab/${v}_$k.json > /dev/null 2>&1
    $D/$v/ablate-attention-bench --impl sage --shape 16,12,1024,64 --causal yes --json $R/ab/${v}t_$k.json > /dev/null 2>&1
  done
done
for v in bin h c4; do
  python3 kernels/bench/ab.py --new $R/ab/${v}_*.json $R/ab/${v}t_*.json --base $R/ab/base_*.json $R/ab/baset_*.json --title "$v vs ebd922a" > $R/ab_${v}.md
  grep -E "bwd \|" $R/ab_${v}.md | awk -F'|' -v v=$v '{print v, $3, $4, $9}'
done
python3 kernels/bench/ab.py --new $R/ab/bin_*.json $R/ab/bint_*.json --base $R/ab/h_*.json $R/ab/ht_*.json --title "uniform dQ bulk operands vs h" > $R/ab_u2_vs_h.md
grep -E "bwd \|" $R/ab_u2_vs_h.md | awk -F'|' '{print "u2/h", $3, $4, $9}'
cd $OUT && tar -czf r.tgz r && rm -rf r
