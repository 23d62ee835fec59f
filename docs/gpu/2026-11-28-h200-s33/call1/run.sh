ROOT=$PWD; cd .gpu/s33c1 && tar -xJf bundle.tar.xz && D=$PWD/bundle && cd $ROOT
R=$OUT/r; mkdir -p $R
nvidia-smi -L > $R/nvidia-smi-L.txt
T0=$(date +%s)
# This session's tree (9605fdd: the launchers' grid-limit checks, host code only): every GPU test
# binary (the ctest label gpu), then the bench beside SDPA in the same run.
bash kernels/bench/gpu_suite.sh $D/bin $R; echo "suite rc=$?"
echo "tests $(( $(date +%s) - T0 )) s"
$D/bin/ablate-attention-bench --json $R/bench.json > $R/bench.txt 2>&1
python3 kernels/bench/sdpa_bench.py --json $R/sdpa.json > $R/sdpa.txt 2>&1
python3 kernels/bench/compare.py $R/bench.json $R/sdpa.json > $R/compare.md 2>&1
echo "bench $(( $(date +%s) - T0 )) s"
# The production d128 backward kernels' SASS opcode mix (which conversion the folds compile to).
cuobjdump -sass $D/bin/ablate-attention-bench > $R/sass_all.txt 2>&1
for k in SageBackwardKernelILi128ELb0ELi7712696E SageBackwardKernelILi128ELb1ELi16232376E; do
  awk -v k="$k" '/Function :/ {on = index($0, k) > 0} on && /\/\*[0-9a-f]+\*\// {
      s = $0; sub(/^[ \t]*\/\*[0-9a-f]+\*\/[ \t]+/, "", s); sub(/^@!?U?P[0-9T] +/, "", s); split(s, w, /[ ;]/); op = w[1];
      sub(/\..*/, "", op); if (op != "") n[op]++ }
    END {for (o in n) print n[o], o}' $R/sass_all.txt | sort -rn > $R/opmix_$k.txt
  echo "== $k"; head -25 $R/opmix_$k.txt
done
rm -f $R/sass_all.txt
grep -E "fwd\+bwd" $R/compare.md
cd $OUT && tar -czf r.tgz r && rm -rf r
