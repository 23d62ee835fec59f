#!/usr/bin/env python3
"""Instructions executed per CUDA source line of one kernel, from Nsight Compute's source page.

Profile with source counters, export the source page with CUDA and SASS correlated, summarize:

    ncu --section SourceCounters --import-source yes -o rep -k regex:SageBackwardKernel \\
        --launch-count 1 <bench command>
    ncu -i rep.ncu-rep --page source --csv --print-source cuda,sass | gzip > src.csv.gz
    python3 kernels/bench/ncu_lines.py src.csv.gz --per 262144 [--top 40]

Prints the source lines with the most warp instructions executed (divided by --per, e.g. the
number of warp-tiles, to read instructions per warp and tile) and their share of the warp stall
samples. That is how a runtime option test inside an unrolled loop shows up: predicated
instructions issue whether or not the option is on.
"""
import argparse
import csv
import gzip


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", help="ncu --page source --csv --print-source cuda,sass output")
    ap.add_argument("--per", type=float, default=1.0, help="divide instruction counts by this")
    ap.add_argument("--top", type=int, default=40, help="lines to list")
    args = ap.parse_args()
    opener = gzip.open if args.csv.endswith(".gz") else open
    with opener(args.csv, "rt") as f:
        rows = list(csv.reader(f))
    path, lines = "", []
    for r in rows:
        if len(r) >= 2 and r[0] == "File Path":
            path = r[1].split("/")[-1]
            continue
        # Source-line rows carry a line number; the SASS rows under them have none.
        if len(r) < 8 or r[0] in ("Function Name", "Line No") or not r[0]:
            continue
        try:
            executed, samples = int(r[7]), int(r[4] or 0)
        except ValueError:
            continue
        lines.append((executed, samples, f"{path}:{r[0]}", r[1].strip()[:90]))
    total = sum(x[0] for x in lines)
    samples = sum(x[1] for x in lines) or 1
    print(f"warp instructions executed {total} ({total / args.per:.1f} per unit), "
          f"warp samples {samples}")
    for executed, smp, where, src in sorted(lines, reverse=True)[: args.top]:
        print(f"{executed / args.per:9.1f} {100 * smp / samples:5.1f}%  {where}  {src}")


if __name__ == "__main__":
    main()
