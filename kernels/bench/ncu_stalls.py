#!/usr/bin/env python3
"""Warp-stall summary of one kernel from Nsight Compute's SASS source page.

Profile with source counters, export the source page as CSV, then summarize:

    ncu --section SourceCounters --section WarpStateStats --import-source yes -o rep \\
        -k regex:SageBackwardKernel --launch-skip 1 --launch-count 1 <bench command>
    ncu -i rep.ncu-rep --page source --csv --print-source sass > src.csv
    python3 kernels/bench/ncu_stalls.py src.csv [--top 30] [--lo 1cb0 --hi b400]

Prints the sampled stall reasons (share of the warp samples, the opcodes that carry each) and the
instructions with the most samples (offset from the kernel's first instruction, SASS, top two
reasons, times executed). --lo / --hi (hex offsets, as printed) keep only the instructions in
[lo, hi): one loop, e.g. a warp-specialized kernel's consumer loop without its producer's waits,
which otherwise dominate the long-scoreboard samples. The input may be gzip-compressed (.gz).
"""
import argparse
import collections
import csv
import gzip


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", help="ncu --page source --csv --print-source sass output (.csv, .gz)")
    ap.add_argument("--top", type=int, default=30, help="instructions to list")
    ap.add_argument("--lo", type=lambda x: int(x, 16), default=0,
                    help="first offset kept (hex, from the kernel's first instruction)")
    ap.add_argument("--hi", type=lambda x: int(x, 16), default=None,
                    help="first offset past the range (hex)")
    args = ap.parse_args()
    opener = gzip.open if args.csv.endswith(".gz") else open
    with opener(args.csv, "rt") as f:
        rows = list(csv.reader(f))
    # Row 0 names the kernel, row 1 is the header.
    header, data = rows[1], rows[2:]
    ix = {name: i for i, name in enumerate(header)}
    if "Source" not in ix or "Warp Stall Sampling (All Samples)" not in ix:
        raise SystemExit(f"{args.csv}: not an ncu SASS source page (header: {header[:6]})")
    reasons = [n for n in header if n.startswith("stall_") and "Not Issued" not in n]
    total = collections.Counter()
    by_op = collections.defaultdict(collections.Counter)
    insts = []
    executed = 0
    first = None
    for r in data:
        if len(r) < len(header):
            continue
        addr = int(r[ix["Address"]], 16)
        first = addr if first is None else first
        off = addr - first
        if off < args.lo or (args.hi is not None and off >= args.hi):
            continue
        src = r[ix["Source"]].strip()
        parts = src.split()
        op = parts[0] if parts else ""
        if op.startswith("@") and len(parts) > 1:
            op = parts[1]
        op = op.split(".")[0]
        counts = {rs: int(r[ix[rs]] or 0) for rs in reasons}
        for rs, v in counts.items():
            total[rs] += v
            by_op[rs][op] += v
        e = int(r[ix["Instructions Executed"]] or 0)
        executed += e
        insts.append((int(r[ix["Warp Stall Sampling (All Samples)"]] or 0), off, src, counts, e))
    span = f"[{args.lo:x}, {'end' if args.hi is None else format(args.hi, 'x')})"
    if not insts:
        raise SystemExit(f"{args.csv}: no instruction in the offset range {span}")
    samples = sum(total.values())
    print(f"{rows[0][1] if len(rows[0]) > 1 else ''}")
    where = "" if args.lo == 0 and args.hi is None else f" in offsets {span}"
    print(f"warp samples {samples}, warp instructions executed {executed}{where}")
    samples = samples or 1  # (the shares below)
    for rs, v in total.most_common(9):
        print(f"{rs:24s} {v:7d} {v / samples * 100:5.1f}%  top ops: {by_op[rs].most_common(5)}")
    print("instructions with the most samples (samples, offset, SASS, top reasons, executed):")
    for s, off, src, counts, e in sorted(insts, key=lambda x: -x[0])[: args.top]:
        top = sorted(counts.items(), key=lambda x: -x[1])[:2]
        print(s, f"{off:x}", src[:58], top, e)


if __name__ == "__main__":
    main()
