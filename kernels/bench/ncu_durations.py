#!/usr/bin/env python3
"""Per-kernel launch durations from an Nsight Compute raw-page CSV of a whole bench run.

Profile every launch of one configuration with a cheap metric set, in situ:

    ncu -k 'regex:Quantize|KMean|DqFinal' --cache-control none --clock-control none \\
        --metrics gpu__time_duration.sum --csv --page raw \\
        ablate-attention-bench --impl sage --shape 4,16,2048,128 --causal no --iters 20 --warmup 1 > d.csv
    python3 kernels/bench/ncu_durations.py d.csv [more.csv.gz ...]

Prints, per kernel (in first-launch order), the launch count, median and minimum duration in
microseconds. With `--split 21` the launches of a kernel that runs in both the bench's
backward-only and fwd+bwd sections (the prep and dQ launches: 1 + 20 of each at --iters 20
--warmup 1) are summarized separately: the first section's prep zeroes the dQ accumulator (no
forward armed it), the second's does not.
"""
import argparse
import collections
import csv
import gzip
import statistics


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", nargs="+")
    ap.add_argument("--split", type=int, default=0,
                    help="summarize launches [1, split) and [split, 2 split) of kernels launched 2 split times")
    args = ap.parse_args()
    for path in args.csv:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt") as f:
            lines = [line for line in f if line.startswith('"')]
        rows = csv.reader(lines)
        header = next(rows)
        next(rows)  # units
        col = {h: i for i, h in enumerate(header)}
        by = collections.OrderedDict()
        for r in rows:
            name = r[col["Kernel Name"]].split("(")[0].replace("void ", "")
            name = name.replace("ablate::kernels::<unnamed>::", "").replace("<unnamed>::", "")
            us = float(r[col["gpu__time_duration.sum"]].replace(",", "")) / 1000.0
            by.setdefault(name, []).append(us)
        print(path)
        for name, t in by.items():
            line = f"  {name[:48]:48s} n={len(t):3d}  median {statistics.median(t):8.2f} us  min {min(t):8.2f}"
            if args.split and len(t) == 2 * args.split:
                line += (f"  | bwd-only {statistics.median(t[1:args.split]):7.2f}"
                         f"  fwd+bwd {statistics.median(t[args.split:]):7.2f}")
            print(line)


if __name__ == "__main__":
    main()
