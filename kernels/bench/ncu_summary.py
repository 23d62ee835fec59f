#!/usr/bin/env python3
"""One markdown table of the Nsight Compute metrics that say what limits a kernel, a column per
kernel, from `ncu --import REP --page raw --csv` files (ncu_attention.sh writes them).

Rows: the kernel's name, time, SM / compute-memory / DRAM throughput, every tensor-pipe
utilization metric the report has, the shared-memory pipe's wavefronts and bank conflicts,
registers per thread, achieved occupancy, then each kernel's leading stall reasons (warp cycles
per issued instruction by reason, largest first). A file that is missing or holds no data row
gives a column saying so. The CSV: a header row of metric names, optionally a row of units, then
one row per profiled kernel launch (the last one is used); numbers may carry thousands separators.
  ncu_summary.py [--title T] [--stalls K] A.csv [B.csv ...]
"""
import argparse
import csv
import os
import re
import sys

# (label, regex over metric names), in table order; a regex may match several metrics.
ROWS = [
    ("time", r"gpu__time_duration\.sum"),
    ("SM throughput", r"sm__throughput\.avg\.pct_of_peak_sustained_elapsed"),
    ("compute-memory throughput", r"gpu__compute_memory_throughput\.avg\.pct_of_peak_sustained_elapsed"),
    ("DRAM throughput", r"(gpu__)?dram__throughput\.avg\.pct_of_peak_sustained_elapsed"),
    ("tensor pipe", r"sm__pipe_tensor\w*\.avg\.pct_of_peak_sustained_(active|elapsed)"),
    ("shared wavefronts", r"l1tex__data_pipe_lsu_wavefronts_mem_shared\.sum"),
    ("shared bank conflicts", r"l1tex__data_bank_conflicts_pipe_lsu_mem_shared\.sum"),
    ("registers / thread", r"launch__registers_per_thread"),
    ("achieved occupancy", r"sm__warps_active\.avg\.pct_of_peak_sustained_active"),
]
STALL = re.compile(r"smsp__average_warps?_issue_stalled_(\w+)_per_issue_active\.ratio")


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def read_report(path):
    """{metric: (value text, unit)} of the file's last data row; None when there is none."""
    if not os.path.exists(path):
        return None
    with open(path, newline="") as f:
        rows = [r for r in csv.reader(f) if r]
    # ncu may print notes before the table: the header is the first row naming a kernel.
    start = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
    if start is None or len(rows) <= start + 1:
        return None
    header = rows[start]
    body = rows[start + 1:]
    units = None
    if body and "ID" in header and number(body[0][header.index("ID")]) is None:
        units, body = body[0], body[1:]
    if not body:
        return None
    last = body[-1]
    return {name: (last[i] if i < len(last) else "", units[i] if units and i < len(units) else "")
            for i, name in enumerate(header)}


def table(reports, title="", stalls=5):
    """The markdown lines for {column: report or None}."""
    cols = list(reports)
    lines = [f"ncu: {title}" if title else "ncu", "",
             "| metric | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols)]
    present = {c: r for c, r in reports.items() if r}
    lines.append("| kernel | " + " | ".join(
        (present[c].get("Kernel Name", ("?", ""))[0][:60] if c in present else "not profiled")
        for c in cols) + " |")
    names = sorted({m for r in present.values() for m in r})
    for label, rx in ROWS:
        pat = re.compile(rx + r"$")
        for m in [n for n in names if pat.match(n)]:
            unit = next((r[m][1] for r in present.values() if m in r and r[m][1]), "")
            cells = [present[c][m][0] if c in present and m in present[c] else "" for c in cols]
            name = label if label != "tensor pipe" else f"tensor pipe ({m.split('.')[0]})"
            lines.append(f"| {name}{f' ({unit})' if unit else ''} | " + " | ".join(cells) + " |")
    for c in cols:
        if c not in present:
            continue
        by_reason = sorted(((number(v) or 0.0, STALL.match(m).group(1))
                            for m, (v, _) in present[c].items() if STALL.match(m)), reverse=True)
        top = ", ".join(f"{why} {v:.2f}" for v, why in by_reason[:stalls] if v > 0)
        lines.append(f"| stalls of {c} (cycles per issue) | " + " | ".join(
            top if d == c else "" for d in cols) + " |")
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--title", default="")
    ap.add_argument("--stalls", type=int, default=5, help="stall reasons per kernel")
    ap.add_argument("csv", nargs="+")
    a = ap.parse_args()
    reports = {os.path.splitext(os.path.basename(p))[0]: read_report(p) for p in a.csv}
    print("\n".join(table(reports, a.title, a.stalls)))
    return 0 if any(reports.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
