#!/usr/bin/env python3
"""PyTorch SDPA (flash and cuDNN backends) on the shapes of ablate-attention-bench.

Same conventions as the C++ bench: bf16 (B, H, N, D) inputs ~ N(0, 1), CUDA events, warm-up, the
median of --iters timed iterations enqueued back to back (--sync-each: each waited for before the
next, the method earlier); FLOPs 4*B*H*N^2*D forward (halved when causal), backward 2.5x,
fwd+bwd 3.5x. Backward alone is timed with torch.autograd.grad on a retained graph.
Writes JSON (--json, default sdpa_bench.json) in the C++ bench's format and prints it.
"""
import argparse
import json
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SHAPES = [(4, 16, 2048, 128), (2, 16, 8192, 128), (8, 16, 1024, 64)]
BACKENDS = {"sdpa-flash": SDPBackend.FLASH_ATTENTION, "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION}


def time_ms(fn, warmup, iters, sync_each):
    """Median ms per run; runs enqueued back to back unless sync_each (see the C++ bench's TimeMs)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    pairs = []
    for _ in range(iters):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        if sync_each:
            b.synchronize()
        pairs.append((a, b))
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) for a, b in pairs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default="sdpa_bench.json")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--sync-each", action="store_true",
                    help="wait for each timed run before enqueueing the next")
    ap.add_argument("--shape", action="append", metavar="B,H,N,D",
                    help="a shape instead of the bench's three (repeatable)")
    args = ap.parse_args()
    shapes = SHAPES
    if args.shape:
        try:
            shapes = [tuple(int(x) for x in s.split(",")) for s in args.shape]
        except ValueError:
            ap.error("--shape wants four integers B,H,N,D")
        if any(len(s) != 4 or min(s) < 1 for s in shapes):
            ap.error("--shape wants four positive integers B,H,N,D")
    iters = max(20, args.iters)
    torch.manual_seed(0)
    results = []
    for (B, H, N, D) in shapes:
        for causal in (False, True):
            q, k, v = (torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16,
                                   requires_grad=True) for _ in range(3))
            do = torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16)
            fwd_flops = 4.0 * B * H * N * N * D / (2 if causal else 1)
            for name, backend in BACKENDS.items():
                try:
                    with sdpa_kernel([backend]):
                        def fwd():
                            with torch.no_grad():
                                F.scaled_dot_product_attention(q, k, v, is_causal=causal)

                        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)

                        def bwd():
                            torch.autograd.grad(out, (q, k, v), do, retain_graph=True)

                        def both():
                            o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                            torch.autograd.grad(o, (q, k, v), do)

                        for pass_, fn, mult in (("fwd", fwd, 1.0), ("bwd", bwd, 2.5),
                                                ("fwd+bwd", both, 3.5)):
                            ms = time_ms(fn, args.warmup, iters, args.sync_each)
                            results.append(dict(impl=name, B=B, H=H, N=N, D=D, causal=causal,
                                                pass_=pass_, ms=ms,
                                                tflops=mult * fwd_flops / (ms * 1e-3) / 1e12))
                        del out
                except RuntimeError as e:  # backend not available for this shape / build
                    print(f"# {name} B{B} H{H} N{N} D{D} causal={causal}: {e}".splitlines()[0])
    for r in results:
        r["pass"] = r.pop("pass_")
    doc = {"source": "sdpa_bench.py", "device": torch.cuda.get_device_name(0),
           "torch": torch.__version__, "iters": iters,
           "timing": "sync-each" if args.sync_each else "back-to-back", "results": results}
    with open(args.json, "w") as f:
        json.dump(doc, f, indent=1)
    print("| impl | B | H | N | D | causal | pass | ms | TFLOP/s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['impl']} | {r['B']} | {r['H']} | {r['N']} | {r['D']} | "
              f"{'yes' if r['causal'] else 'no'} | {r['pass']} | {r['ms']:.3f} | {r['tflops']:.1f} |")
    print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
