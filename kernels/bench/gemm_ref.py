#!/usr/bin/env python3
"""PyTorch's time for the training step's GEMMs that ablate-gemm-bench measured (its --json
file, with LtGemm's time before and after GEMM tuning), each as the PyTorch GPT's autograd runs it in bf16: forward F.linear(x, w), the input
gradient dy @ w, the weight gradient dy^T @ x (bf16 outputs: under autocast PyTorch casts to
fp32 afterwards, in a separate kernel). Prints the bench's table with a PyTorch column.

    kernels/bench/gemm_ref.py GEMM.json [--reps 20]
"""
import argparse
import json
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json")
    ap.add_argument("--reps", type=int, default=20)
    a = ap.parse_args()
    import torch
    import torch.nn.functional as F
    rows = json.load(open(a.json))
    dev, bf = "cuda", torch.bfloat16

    def timed(f):
        for _ in range(3):
            f()
        torch.cuda.synchronize()
        ms = []
        for _ in range(5):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(a.reps):
                f()
            e.record()
            torch.cuda.synchronize()
            ms.append(s.elapsed_time(e) / a.reps)
        return sorted(ms)[len(ms) // 2]

    print("| call | x/step | m x n x k | ablate LtGemm ms | tuned LtGemm ms | PyTorch ms | "
          "PyTorch / LtGemm | PyTorch / tuned |")
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    tot = {"lt": 0.0, "tuned": 0.0, "torch": 0.0}
    for r in rows:
        m, n, k = r["m"], r["n"], r["k"]
        if r["ta"]:  # forward: m = OC, n = N tokens, k = IC
            x, w = torch.randn(n, k, device=dev, dtype=bf), torch.randn(m, k, device=dev, dtype=bf)
            f = lambda: F.linear(x, w)
        elif r["tb"]:  # weight gradient: m = IC, n = OC, k = N
            dy, x = torch.randn(k, n, device=dev, dtype=bf), torch.randn(k, m, device=dev, dtype=bf)
            f = lambda: dy.t() @ x
        else:  # input gradient: m = IC, n = N, k = OC
            dy, w = torch.randn(n, k, device=dev, dtype=bf), torch.randn(k, m, device=dev, dtype=bf)
            f = lambda: dy @ w
        t = timed(f)
        c = r["count"]
        tot["lt"] += c * r["ltgemm_ms"]
        tot["tuned"] += c * r["tuned_ms"]
        tot["torch"] += c * t
        print(f"| {r['call']} | {c} | {m} x {n} x {k} | {r['ltgemm_ms']:.3f} | {r['tuned_ms']:.3f} | "
              f"{t:.3f} | {t / r['ltgemm_ms']:.3f} | {t / r['tuned_ms']:.3f} |")
        del f
    print(f"| **step total** | | | {tot['lt']:.2f} | {tot['tuned']:.2f} | {tot['torch']:.2f} | "
          f"{tot['torch'] / tot['lt']:.3f} | {tot['torch'] / tot['tuned']:.3f} |")


if __name__ == "__main__":
    sys.exit(main())
