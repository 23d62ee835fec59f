#!/usr/bin/env bash
# Hardware counters of the attention backwards beside cuDNN's, one shape, one GPU call: Nsight
# Compute (`ncu --set full`, clocks left alone) on one launch each of FPA's backward
# (FpaBackwardWsKernel), SageBwd's (SageBackwardKernel) and SDPA-cuDNN's (its bprop kernel, from
# PyTorch), then one table of the metrics that say what limits a kernel: time, SM and memory
# throughput, the tensor and shared-memory pipes, registers, occupancy and the leading stall
# reasons. Needs ncu with counter access (the Firecracker H100 machines; docs: the lab README).
#   kernels/bench/ncu_attention.sh BIN_DIR OUT [B,H,N,D] [causal yes|no]
# BIN_DIR holds ablate-attention-bench (a build tree's tests/gpu/kernels/attention or a bundle's
# bin/). Defaults: 4,16,2048,128, non-causal. Writes OUT/<kernel>.ncu-rep, OUT/<kernel>.txt (the
# details page), OUT/<kernel>.csv (every metric), OUT/<kernel>.log (the profiled run) and
# OUT/summary.md (printed); a kernel that could not be profiled is named in the summary.
set -uo pipefail
usage="usage: ncu_attention.sh BIN_DIR OUT [B,H,N,D] [yes|no]"
bin="${1:?$usage}"
out="${2:?$usage}"
shape="${3:-4,16,2048,128}"
causal="${4:-no}"
[[ "$shape" =~ ^[0-9]+,[0-9]+,[0-9]+,(64|128)$ ]] || { echo "ncu_attention.sh: shape B,H,N,D (D 64 or 128), not '$shape'" >&2; exit 2; }
case "$causal" in yes | no) ;; *) echo "ncu_attention.sh: causal yes or no, not '$causal'" >&2; exit 2 ;; esac
[ -x "$bin/ablate-attention-bench" ] || { echo "ncu_attention.sh: no $bin/ablate-attention-bench" >&2; exit 2; }
command -v ncu >/dev/null || { echo "ncu_attention.sh: ncu is not on the PATH" >&2; exit 2; }
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mkdir -p "$out"
ncu_one=(ncu --clock-control none --set full --launch-skip 2 --launch-count 1 --force-overwrite)
bench_args=(--shape "$shape" --causal "$causal" --deterministic no --iters 20 --warmup 1)

"${ncu_one[@]}" -k regex:FpaBackwardWs -o "$out/fpa_bwd" \
  "$bin/ablate-attention-bench" --impl fpa "${bench_args[@]}" >"$out/fpa_bwd.log" 2>&1
"${ncu_one[@]}" -k regex:SageBackwardKernel -o "$out/sage_bwd" \
  "$bin/ablate-attention-bench" --impl sage "${bench_args[@]}" >"$out/sage_bwd.log" 2>&1
IFS=, read -r B H N D <<<"$shape"
py_causal=False
[ "$causal" = no ] || py_causal=True
cat >"$out/cudnn_bwd.py" <<PY
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
q, k, v = [torch.randn($B, $H, $N, $D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
           for _ in range(3)]
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    for _ in range(4):
        o = F.scaled_dot_product_attention(q, k, v, is_causal=$py_causal)
        o.backward(torch.randn_like(o))
torch.cuda.synchronize()
PY
"${ncu_one[@]}" -k regex:bprop -o "$out/cudnn_bwd" python3 "$out/cudnn_bwd.py" >"$out/cudnn_bwd.log" 2>&1

for k in fpa_bwd sage_bwd cudnn_bwd; do
  [ -f "$out/$k.ncu-rep" ] || continue
  ncu --import "$out/$k.ncu-rep" --page details >"$out/$k.txt" 2>&1
  ncu --import "$out/$k.ncu-rep" --page raw --csv >"$out/$k.csv" 2>&1
done
python3 "$here/ncu_summary.py" --title "B,H,N,D $shape, causal $causal" \
  "$out/fpa_bwd.csv" "$out/sage_bwd.csv" "$out/cudnn_bwd.csv" | tee "$out/summary.md"
