#!/usr/bin/env python3
"""One PyTorch SDPA forward + backward inside cudaProfilerStart / Stop, for Nsight Compute.

    ncu --profile-from-start off --section ... python3 kernels/bench/sdpa_one.py B,H,N,D cudnn|flash yes|no

Three warm-up iterations run outside the profiled range, the fourth inside it, so ncu sees one
launch of each of the backend's kernels (the forward, the backward and their helpers) with the
bench's inputs (bf16 (B, H, N, D) ~ N(0, 1)). It was used to profile cuDNN's and
FA2's kernels beside ours.
"""
import sys
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

B, H, N, D = (int(x) for x in sys.argv[1].split(","))
backend = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}[sys.argv[2]]
causal = sys.argv[3] == "yes"
torch.manual_seed(0)
q, k, v, do = (torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16) for _ in range(4))
for t in (q, k, v):
    t.requires_grad_(True)
with sdpa_kernel([backend]):
    for it in range(4):
        if it == 3:
            torch.cuda.synchronize()
            torch.cuda.cudart().cudaProfilerStart()
        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        g = torch.autograd.grad(o, (q, k, v), do)
        if it == 3:
            torch.cuda.synchronize()
            torch.cuda.cudart().cudaProfilerStop()
print("ok", o.shape)
