ROOT=$PWD; cd .gpu/c3 && tar -xJf bundle.tar.xz && B=$PWD/bundle/bin && BASE=$PWD/bundle/base && cd $ROOT
R=$OUT/r; mkdir -p $R/ab
nvidia-smi -L > $R/nvidia-smi-L.txt
SAGE_BWD_LAB=1 SAGE_FWD_LAB=1 $B/sagebwd_gpu_test > $R/sagebwd_gpu_test_labs.log 2>&1; echo "sagebwd rc=$?" >> $R/suite.txt
tail -3 $R/sagebwd_gpu_test_labs.log
for k in 1 2 3; do
  $B/ablate-attention-bench --impl sage --json $R/ab/new_$k.json > /dev/null 2>&1
  $BASE/ablate-attention-bench --impl sage --json $R/ab/base_$k.json > /dev/null 2>&1
  $B/ablate-attention-bench --impl sage --shape 16,12,1024,64 --causal yes --json $R/ab/newt_$k.json > /dev/null 2>&1
  $BASE/ablate-attention-bench --impl sage --shape 16,12,1024,64 --causal yes --json $R/ab/baset_$k.json > /dev/null 2>&1
done
python3 kernels/bench/ab.py --new $R/ab/new_*.json --base $R/ab/base_*.json --title "scale chain vs ebd922a" > $R/ab_chain.md
python3 kernels/bench/ab.py --new $R/ab/newt_*.json --base $R/ab/baset_*.json --title "scale chain vs ebd922a, training shape" > $R/ab_chain_train.md
cat $R/ab_chain.md $R/ab_chain_train.md
cuobjdump -sass $B/ablate-attention-bench | awk '/Function :/{p=($0 ~ /SageBackwardKernelILi128ELb0ELi7712696E/)} p' > $R/bwd_new.sass
cd $OUT && tar -czf r.tgz r && rm -rf r
