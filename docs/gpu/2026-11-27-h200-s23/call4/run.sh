ROOT=$PWD; cd .gpu/c4 && tar -xJf bundle.tar.xz && B=$PWD/bundle/bin && BASE=$PWD/bundle/base && A=$PWD/bundle/a && cd $ROOT
R=$OUT/r; mkdir -p $R/ab
nvidia-smi -L > $R/nvidia-smi-L.txt
SAGE_BWD_LAB=1 SAGE_FWD_LAB=1 $B/sagebwd_gpu_test > $R/sagebwd_gpu_test_labs.log 2>&1; echo "sagebwd rc=$?" >> $R/suite.txt
tail -3 $R/sagebwd_gpu_test_labs.log
for k in 1 2 3 4; do
  $B/ablate-attention-bench --impl sage --json $R/ab/new_$k.json > /dev/null 2>&1
  $BASE/ablate-attention-bench --impl sage --json $R/ab/base_$k.json > /dev/null 2>&1
  $A/ablate-attention-bench --impl sage --json $R/ab/a_$k.json > /dev/null 2>&1
done
for k in 1 2 3; do
  $B/ablate-attention-bench --impl sage --shape 16,12,1024,64 --causal yes --json $R/ab/newt_$k.json > /dev/null 2>&1
  $BASE/ablate-attention-bench --impl sage --shape 16,12,1024,64 --causal yes --json $R/ab/baset_$k.json > /dev/null 2>&1
done
python3 kernels/bench/ab.py --new $R/ab/new_*.json --base $R/ab/base_*.json --title "scale chain, one uniform test (new) vs ebd922a" > $R/ab_chain1.md
python3 kernels/bench/ab.py --new $R/ab/a_*.json --base $R/ab/base_*.json --title "scale chain, a test per reciprocal (call 3's) vs ebd922a" > $R/ab_chain3.md
python3 kernels/bench/ab.py --new $R/ab/new_*.json --base $R/ab/a_*.json --title "one uniform test vs a test per reciprocal" > $R/ab_chain1_vs_3.md
python3 kernels/bench/ab.py --new $R/ab/newt_*.json --base $R/ab/baset_*.json --title "scale chain (new) vs ebd922a, training shape" > $R/ab_chain1_train.md
cat $R/ab_chain1.md $R/ab_chain3.md $R/ab_chain1_vs_3.md $R/ab_chain1_train.md | grep -v "^$"
cd $OUT && tar -czf r.tgz r && rm -rf r
