ROOT=$PWD; cd .gpu/c5 && tar -xJf bundle.tar.xz && B=$PWD/bundle/bin && BASE=$PWD/bundle/base && C4=$PWD/bundle/c4 && cd $ROOT
R=$OUT/r; mkdir -p $R/ab
nvidia-smi -L > $R/nvidia-smi-L.txt
$B/sage_scale_gpu_test > $R/sage_scale_gpu_test.log 2>&1; echo "sage_scale rc=$?" >> $R/suite.txt
tail -4 $R/sage_scale_gpu_test.log
SAGE_BWD_LAB=1 SAGE_FWD_LAB=1 $B/sagebwd_gpu_test > $R/sagebwd_gpu_test_labs.log 2>&1; echo "sagebwd rc=$?" >> $R/suite.txt
tail -3 $R/sagebwd_gpu_test_labs.log
for k in 1 2 3 4; do
  $B/ablate-attention-bench --impl sage --json $R/ab/new_$k.json > /dev/null 2>&1
  $BASE/ablate-attention-bench --impl sage --json $R/ab/base_$k.json > /dev/null 2>&1
  $C4/ablate-attention-bench --impl sage --json $R/ab/c4_$k.json > /dev/null 2>&1
done
for k in 1 2 3; do
  $B/ablate-attention-bench --impl sage --shape 16,12,1024,64 --causal yes --json $R/ab/newt_$k.json > /dev/null 2>&1
  $BASE/ablate-attention-bench --impl sage --shape 16,12,1024,64 --causal yes --json $R/ab/baset_$k.json > /dev/null 2>&1
done
python3 kernels/bench/ab.py --new $R/ab/new_*.json --base $R/ab/base_*.json --title "scale chain + predicated dsrow adds vs ebd922a" > $R/ab_red.md
python3 kernels/bench/ab.py --new $R/ab/new_*.json --base $R/ab/c4_*.json --title "predicated dsrow adds (+ d64 one uniform test) vs call 4's binary" > $R/ab_red_vs_c4.md
python3 kernels/bench/ab.py --new $R/ab/newt_*.json --base $R/ab/baset_*.json --title "training shape vs ebd922a" > $R/ab_red_train.md
cat $R/ab_red.md $R/ab_red_vs_c4.md $R/ab_red_train.md | grep -v "^$"
cd $OUT && tar -czf r.tgz r && rm -rf r
