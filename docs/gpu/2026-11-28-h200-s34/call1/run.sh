ROOT=$PWD; cd .gpu/s34c1 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
# Session 34's tree (no kernel changed; the product fixes of its audit): every GPU test binary
# (the ctest label gpu), then the bench beside SDPA in the same run.
bash kernels/bench/gpu_suite.sh $D/bin $R; echo "suite rc=$?"
echo "tests $(( $(date +%s) - T0 )) s"
$D/bin/ablate-attention-bench --json $R/bench.json > $R/bench.txt 2>&1
python3 kernels/bench/sdpa_bench.py --json $R/sdpa.json > $R/sdpa.txt 2>&1
python3 kernels/bench/compare.py $R/bench.json $R/sdpa.json > $R/compare.md 2>&1
echo "bench $(( $(date +%s) - T0 )) s"
grep -E "fwd\+bwd" $R/compare.md
# The whole system on the GPUs: ablated, one ablate-worker with every GPU, a 2-trial GPU sweep
# (fpa vs sagebwd, one GPU each) on a generated corpus; the trainers' CUDA environment as the
# worker set it; a second worker on the same work dir (refused by the lock).
E=$R/e2e; mkdir -p $E/coord
python3 -c "
import random; random.seed(1); w='alpha beta gamma delta epsilon zeta eta theta iota kappa'.split()
print(' '.join(random.choice(w) + ('.' if random.random() < 0.1 else '') for _ in range(60000)))" > $E/corpus.txt
$D/bin/ablated --data-dir $E/coord --grpc 127.0.0.1:0 > $E/ablated.log 2>&1 &
for i in $(seq 100); do [ -s $E/coord/ablated.addr ] && break; sleep 0.1; done
export ABLATE_COORDINATOR=$(cat $E/coord/ablated.addr) ABLATE_TOKEN_FILE=$E/coord/token
$D/bin/ablate-worker --token-file $ABLATE_TOKEN_FILE --gpus all --cpu-slots 0 --work-dir $E/w \
  --data-root $E --trainer $D/bin/ablate-train > $E/worker.log 2>&1 &
WPID=$!
sleep 1
$D/bin/ablate-worker --token-file $ABLATE_TOKEN_FILE --gpus all --work-dir $E/w \
  --trainer $D/bin/ablate-train > $E/worker2.log 2>&1; echo "second worker rc=$?" >> $E/worker2.log
cat > $E/gpu.yaml <<YAML
name: gpu-e2e
base:
  data: {corpus: $E/corpus.txt, val_fraction: 0.1, eval_batches: 2}
  model: {seq_len: 128, layers: 2, d_model: 128, heads: 2}
  train: {steps: 60, tokens_per_step: 4096, micro_batch: 32, warmup: 5, eval_every: 30}
  device: cuda
grid: {attention.kind: [fpa, sagebwd]}
resources: {gpus: 1}
YAML
$D/bin/ablate submit $E/gpu.yaml > $E/submit.txt 2>&1
for i in $(seq 100); do P=$(pgrep -f "ablate-train" | head -2); [ -n "$P" ] && break; sleep 0.1; done
sleep 1
for p in $(pgrep -f "bin/ablate-train"); do tr '\0' '\n' < /proc/$p/environ | grep -E "^CUDA_|^ABLATE_TRIAL" | sort | tr '\n' ' '; echo; done > $E/trainer_env.txt
$D/bin/ablate --timeout 300 watch gpu-e2e > $E/watch.txt 2>&1; echo "watch rc=$?" >> $E/watch.txt
$D/bin/ablate results gpu-e2e > $E/results.txt 2>&1
$D/bin/ablate query "SELECT t.id, json_extract(t.axes_json, '$.\"attention.kind\"') AS kind, t.state, a.worker_id, a.gpus_json, a.state AS attempt FROM trials t JOIN attempts a ON a.trial_id = t.id" > $E/attempts.txt 2>&1
kill $WPID; sleep 1; pkill -f "bin/ablated"; sleep 1
cat $E/worker2.log $E/trainer_env.txt $E/watch.txt $E/results.txt $E/attempts.txt
rm -rf $E/w $E/corpus.txt
echo "total $(( $(date +%s) - T0 )) s"
cd $OUT && tar -czf r.tgz r && rm -rf r
