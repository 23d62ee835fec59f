ROOT=$PWD; cd .gpu/s32c9 && tar -xJf bundle.tar.xz && D=$PWD/bundle && B=$PWD && cd $ROOT
R=$OUT/r; mkdir -p $R
# Review mend (EpiDq's values computed once for both dQ paths): the SASS of every backward and
# dQ conversion kernel before and after (comments and addresses aside), then the dQ tests.
for b in premend mend; do
  (mkdir -p $R/$b && cd $R/$b && cuobjdump -xelf all $B/bench-$b > /dev/null 2>&1
   for C in *.cubin; do cuobjdump -sass $C 2>/dev/null | grep -E "Function :|^\s+/\*[0-9a-f]{4,}\*/" \
     | sed -E 's@/\*[0-9a-f]+\*/@@; s@;.*@@; s@ +@ @g' >> sass.txt; done; rm -f *.cubin)
done
python3 - $R <<'PY'
import sys, collections
r = sys.argv[1]
def fns(p):
    d, cur = collections.OrderedDict(), None
    for l in open(p):
        if "Function :" in l:
            cur = l.split("Function :")[1].strip(); d[cur] = []
        elif cur: d[cur].append(l.strip())
    return d
a, b = fns(r + "/premend/sass.txt"), fns(r + "/mend/sass.txt")
keys = [k for k in a if "SageBackward" in k or "DqFinalize" in k]
diff = [k for k in keys if a[k] != b.get(k)]
print(f"{len(keys)} backward / conversion kernels, {len(diff)} with different SASS")
for k in diff: print("  differs:", k)
PY
rm -f $R/premend/sass.txt $R/mend/sass.txt
bash kernels/bench/gpu_suite.sh $D/bin $R sagebwd_gpu_test gpt_cuda_test; echo "suite rc=$?"
cd $OUT && tar -czf r.tgz r && rm -rf r
