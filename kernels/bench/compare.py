#!/usr/bin/env python3
"""Merges ablate-attention-bench JSON and sdpa_bench.py JSON into one markdown table with ratios.

usage: compare.py attention_bench.json sdpa_bench.json
One row per (shape, causal, pass): TFLOP/s of each implementation found (fpa, sagebwd TOPS,
sdpa-flash, sdpa-cudnn) and the ratios fpa/flash, fpa/cudnn, sagebwd/flash, sagebwd/cudnn.
"""
import json
import sys


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    rows = {}
    devices = []
    for path in sys.argv[1:]:
        with open(path) as f:
            doc = json.load(f)
        devices.append(f"{doc.get('source', path)}: {doc.get('device', '?')}")
        for r in doc["results"]:
            key = (r["B"], r["H"], r["N"], r["D"], bool(r["causal"]), r["pass"])
            rows.setdefault(key, {})[r["impl"]] = r["tflops"]
    impls = ["fpa", "sagebwd", "sdpa-flash", "sdpa-cudnn"]
    ratios = [("fpa", "sdpa-flash"), ("fpa", "sdpa-cudnn"), ("sagebwd", "sdpa-flash"),
              ("sagebwd", "sdpa-cudnn")]
    print("; ".join(devices))
    print()
    head = ["shape", "causal", "pass"] + impls + [f"{a}/{b}" for a, b in ratios]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    order = {"fwd": 0, "bwd": 1, "fwd+bwd": 2}
    for key in sorted(rows, key=lambda k: (k[:5], order.get(k[5], 9))):
        B, H, N, D, causal, pass_ = key
        v = rows[key]
        cells = [f"B{B} H{H} N{N} d{D}", "yes" if causal else "no", pass_]
        cells += [f"{v[i]:.1f}" if i in v else "-" for i in impls]
        cells += [f"{v[a] / v[b]:.2f}" if a in v and b in v and v[b] > 0 else "-"
                  for a, b in ratios]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
