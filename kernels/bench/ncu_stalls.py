#!/usr/bin/env python3
"""Warp-stall summary of one kernel from Nsight Compute's SASS source page.

Profile with source counters, export the source page as CSV, then summarize:

    ncu --section SourceCounters --section WarpStateStats --import-source yes -o rep \\
        -k regex:SageBackwardKernel --launch-skip 1 --launch-count 1 <bench command>
    ncu -i rep.ncu-rep --page source --csv --print-source sass > src.csv
    python3 kernels/bench/ncu_stalls.py src.csv [--top 30]

Prints the sampled stall reasons (share of all warp samples, the opcodes that carry each) and the
instructions with the most samples (address, SASS, top two reasons, times executed). The input may
be gzip-compressed (.gz).
"""
import argparse
import collections
import csv
import gzip


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", help="ncu --page source --csv --print-source sass output (.csv, .gz)")
    ap.add_argument("--top", type=int, default=30, help="instructions to list")
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
    for r in data:
        if len(r) < len(header):
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
        insts.append((int(r[ix["Warp Stall Sampling (All Samples)"]] or 0), r[ix["Address"]], src,
                      counts, e))
    samples = sum(total.values()) or 1
    print(f"{rows[0][1] if len(rows[0]) > 1 else ''}")
    print(f"warp samples {samples}, warp instructions executed {executed}")
    for rs, v in total.most_common(9):
        print(f"{rs:24s} {v:7d} {v / samples * 100:5.1f}%  top ops: {by_op[rs].most_common(5)}")
    print("instructions with the most samples (samples, address, SASS, top reasons, executed):")
    for s, addr, src, counts, e in sorted(insts, key=lambda x: -x[0])[: args.top]:
        top = sorted(counts.items(), key=lambda x: -x[1])[:2]
        print(s, addr[-5:], src[:58], top, e)


if __name__ == "__main__":
    main()
