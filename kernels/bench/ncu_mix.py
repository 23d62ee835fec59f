#!/usr/bin/env python3
"""Instruction mix per (query, key) pair from Nsight Compute's per-opcode counts.

Profile one launch of each kernel with the instanced opcode metric printed in full:

    ncu -k regex:SageBackwardKernel --launch-skip 1 --launch-count 1 \\
        --metrics sass__inst_executed_per_opcode --print-metric-instances details \\
        ablate-attention-bench --impl sage --shape 4,16,2048,128 --causal no > sage_bwd.txt
    python3 kernels/bench/ncu_mix.py --pairs 4,16,2048 cudnn_bwd.txt:bprop sage_bwd.txt:SageBackward

Each argument is FILE[:NAME], NAME a substring of the kernel's name in FILE (default: the first
profiled kernel). Prints a markdown table: thread instructions per (query, key) pair (executed
warp instructions x 32 / (B H N^2); halve N^2 yourself for causal) per opcode, one column per
kernel, opcodes by their largest count; rows below --min in every column are left out.
"""
import argparse
import re


def opcode_counts(path, name):
    text = open(path, errors="replace").read()
    if name:
        at = text.find(name)
        if at < 0:
            raise SystemExit(f"{path}: no kernel named like {name!r}")
        text = text[at:]
    at = text.find("sass__inst_executed_per_opcode")
    if at < 0:
        raise SystemExit(f"{path}: no sass__inst_executed_per_opcode (see --print-metric-instances)")
    flat = re.sub(r"\s+", " ", text[at:at + 20000])
    m = re.search(r"sass__inst_executed_per_opcode\s+(?:\S+\s+)?([\d,]+)\s*\((.*?)\)", flat)
    if m is None:
        raise SystemExit(f"{path}: cannot read the per-opcode instances")
    total = int(m.group(1).replace(",", ""))
    counts = {k: int(v.replace(",", "")) for k, v in re.findall(r"([A-Z0-9_.]+):\s*([\d,]+)", m.group(2))}
    return total, counts


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("profiles", nargs="+", metavar="FILE[:NAME]")
    ap.add_argument("--pairs", required=True, metavar="B,H,N",
                    help="the attention shape: pairs = B H N^2")
    ap.add_argument("--min", type=float, default=0.05, help="smallest row shown (per pair)")
    args = ap.parse_args()
    b, h, n = (int(x) for x in args.pairs.split(","))
    pairs = b * h * n * n
    cols = []
    for spec in args.profiles:
        path, _, name = spec.partition(":")
        cols.append((name or path, *opcode_counts(path, name)))
    per = lambda x: x * 32 / pairs  # noqa: E731
    opcodes = sorted({k for _, _, c in cols for k in c}, key=lambda k: -max(c.get(k, 0) for _, _, c in cols))
    print("| opcode | " + " | ".join(name for name, _, _ in cols) + " |")
    print("|---" * (len(cols) + 1) + "|")
    print("| all | " + " | ".join(f"{per(t):.2f}" for _, t, _ in cols) + " |")
    for k in opcodes:
        vals = [per(c.get(k, 0)) for _, _, c in cols]
        if max(vals) >= args.min:
            print(f"| {k} | " + " | ".join(f"{v:.2f}" for v in vals) + " |")


if __name__ == "__main__":
    main()
