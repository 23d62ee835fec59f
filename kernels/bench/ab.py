#!/usr/bin/env python3
"""Same-run A/B of two ablate-attention-bench binaries: median time per row, and the speed-up.

usage: ab.py --new NEW.json [NEW.json ...] --base BASE.json [BASE.json ...] [--title T]
Each JSON is one `ablate-attention-bench --json` run; runs of the two binaries should alternate
in one call (new, base, new, base, ...), so that clock and thermal drift hit both. One markdown
row per (impl, shape, causal, pass): median ms of the new and the base runs, their spread
(max / min - 1 over the runs), and base / new (> 1: the new binary is faster).
"""
import argparse
import json
import statistics


def load(paths):
    rows = {}
    for path in paths:
        with open(path) as f:
            doc = json.load(f)
        for r in doc["results"]:
            key = (r["impl"], r["B"], r["H"], r["N"], r["D"], bool(r["causal"]), r["pass"])
            rows.setdefault(key, []).append(r["ms"])
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--new", nargs="+", required=True)
    ap.add_argument("--base", nargs="+", required=True)
    ap.add_argument("--title", default="")
    args = ap.parse_args()
    new, base = load(args.new), load(args.base)
    if args.title:
        print(args.title)
        print()
    print("| impl | shape | causal | pass | new ms | base ms | spread new / base | base / new |")
    print("|---|---|---|---|---|---|---|---|")
    order = {"fwd": 0, "bwd": 1, "fwd+bwd": 2}
    for key in sorted(set(new) & set(base), key=lambda k: (k[:6], order.get(k[6], 9))):
        impl, B, H, N, D, causal, pass_ = key
        a, b = new[key], base[key]
        ma, mb = statistics.median(a), statistics.median(b)
        spread = f"{max(a) / min(a) - 1:.1%} / {max(b) / min(b) - 1:.1%}"
        print(f"| {impl} | B{B} H{H} N{N} d{D} | {'yes' if causal else 'no'} | {pass_} | "
              f"{ma:.4f} | {mb:.4f} | {spread} | {mb / ma:.3f} |")


if __name__ == "__main__":
    main()
