ROOT=$PWD; cd .gpu/c9 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
bash worker/trainer/cuda/bench/gpu_train_bench.sh $D/bin/ablate-train /tmp/tb 30 > $R/train_bench.md 2>&1; echo "rc=$?"
cat $R/train_bench.md
for f in fpa_adamw sagebwd_adamw; do tail -2 /tmp/tb/$f.jsonl > $R/${f}_tail.jsonl; cp /tmp/tb/$f.yaml $R/; done
cp /tmp/tb/torch.json $R/ 2>/dev/null
echo "done $(( $(date +%s) - T0 )) s"
cd $OUT && tar -czf r.tgz r && rm -rf r
