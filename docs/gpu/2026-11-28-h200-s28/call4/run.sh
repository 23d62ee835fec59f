ROOT=$PWD; cd .gpu/c4 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R/ab
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
# SageBwd: this tree's bench (HEAD: the resident-CTA count cached, 7cc50fb; the head-group
# mapping in attention_common.cuh) against 6e22e39's (session 27's call-5 kernels, the count
# queried on every launch), alternating.
for k in 1 2 3; do
  for sh in 4,16,2048,128 2,16,8192,128 16,12,1024,64; do
    for c in no yes; do
      n=${sh//,/_}_${c}_$k
      timeout 60 $D/bin/ablate-attention-bench --impl sage --shape $sh --causal $c --json $R/ab/new_$n.json > /dev/null 2>&1
      timeout 60 $D/base/ablate-attention-bench --impl sage --shape $sh --causal $c --json $R/ab/base_$n.json > /dev/null 2>&1
    done
  done
  echo "round $k $(( $(date +%s) - T0 )) s"
done
python3 kernels/bench/ab.py --new $R/ab/new_*.json --base $R/ab/base_*.json --title "SageBwd: HEAD's bench (new) vs 6e22e39's (base)" > $R/ab_head.md 2>&1
grep -E "\| (fwd|bwd|fwd\+bwd) \|" $R/ab_head.md
echo "done $(( $(date +%s) - T0 )) s"
cd $OUT && tar -czf r.tgz r && rm -rf r
