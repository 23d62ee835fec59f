#!/usr/bin/env python3
"""Where a training step's GPU time goes, kernel by kernel: from Nsight Compute exports of every
kernel of an ablate-train run (`ncu --import REP --page raw --csv`, which kernel_times.sh writes),
one markdown table of the kernels grouped by name (the demangled name up to its parameter list;
template arguments kept, so two instantiations are two rows): launches per step, microseconds per
step and per launch, and share of the summed kernel time, largest first. With --base, the
launches of a shorter run of the same config are taken off first, so --steps is the difference in
steps and what both runs share (start-up, the final evaluation) drops out. ncu runs the kernels
one at a time, so the times are each kernel's own, without overlap.

The CSV: a header row with "Kernel Name" and "gpu__time_duration.sum", optionally a units row
(ns, us, usecond, ms, msecond, s or second), then one row per launch.
  kernel_times.py --steps S [--base SHORTER.csv] [--top N] [--title T] KERNELS.csv
"""
import argparse
import csv
import sys

SCALE_US = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3,
            "s": 1e6, "second": 1e6}


def group_name(name):
    """The kernel's name without its parameter list ("void f<int>(float*, int)" -> "f<int>")."""
    depth = 0
    for i, ch in enumerate(name):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            name = name[:i]
            break
    name = name.strip()
    return name[5:] if name.startswith("void ") else name


def read_launches(path):
    """[(group name, microseconds)] of every launch in the export."""
    with open(path, newline="") as f:
        rows = [r for r in csv.reader(f) if r]
    head = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
    if head is None:
        raise SystemExit(f"kernel_times.py: {path}: no 'Kernel Name' column (not an ncu raw CSV)")
    cols = rows[head]
    name_i = cols.index("Kernel Name")
    if "gpu__time_duration.sum" not in cols:
        raise SystemExit(f"kernel_times.py: {path}: no gpu__time_duration.sum column")
    time_i = cols.index("gpu__time_duration.sum")
    body = rows[head + 1:]
    scale = 1e-3  # ncu's default unit for durations is nanoseconds
    if body and body[0][name_i] == "":
        unit = body[0][time_i].strip()
        if unit not in SCALE_US:
            raise SystemExit(f"kernel_times.py: {path}: unknown time unit '{unit}'")
        scale = SCALE_US[unit]
        body = body[1:]
    out = []
    for r in body:
        try:
            t = float(r[time_i].replace(",", ""))
        except (ValueError, IndexError):
            continue
        out.append((group_name(r[name_i]), t * scale))
    return out


def grouped(launches):
    """{name: (launches, microseconds)}."""
    groups = {}
    for name, us in launches:
        n, total = groups.get(name, (0, 0.0))
        groups[name] = (n + 1, total + us)
    return groups


def table(groups, steps, top, title=""):
    """groups: {name: (launches, microseconds)} over `steps` steps."""
    groups = {k: v for k, v in groups.items() if v[0] > 0}
    total = sum(t for _, t in groups.values())
    launches = sum(n for n, _ in groups.values())
    lines = []
    if title:
        lines += [title, ""]
    lines.append(f"{launches / steps:.0f} kernel launches per step, {total / steps / 1e3:.3f} ms "
                 f"of kernel time per step ({len(groups)} kernels; {steps} steps profiled)")
    lines.append("")
    lines.append("| kernel | launches / step | us / step | us / launch | share |")
    lines.append("|---|---:|---:|---:|---:|")
    ranked = sorted(groups.items(), key=lambda kv: -kv[1][1])
    for name, (n, t) in ranked[:top]:
        lines.append(f"| `{name}` | {n / steps:.1f} | {t / steps:.1f} | {t / n:.2f} | "
                     f"{100 * t / total:.1f}% |")
    rest = ranked[top:]
    if rest:
        n = sum(v[0] for _, v in rest)
        t = sum(v[1] for _, v in rest)
        lines.append(f"| {len(rest)} others | {n / steps:.1f} | {t / steps:.1f} | {t / n:.2f} | "
                     f"{100 * t / total:.1f}% |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--steps", type=int, required=True,
                    help="training steps the run profiled (with --base: more than the base's)")
    ap.add_argument("--base", help="the same config's shorter run, taken off")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--title", default="")
    a = ap.parse_args()
    if a.steps < 1:
        raise SystemExit("kernel_times.py: --steps must be >= 1")
    launches = read_launches(a.csv)
    if not launches:
        raise SystemExit(f"kernel_times.py: {a.csv}: no kernel launches")
    groups = grouped(launches)
    if a.base:
        for name, (n, t) in grouped(read_launches(a.base)).items():
            m, u = groups.get(name, (0, 0.0))
            if m < n:
                raise SystemExit(f"kernel_times.py: {a.base} launches {name} more often than "
                                 f"{a.csv} ({n} > {m}): not a shorter run of the same config")
            groups[name] = (m - n, max(0.0, u - t))
        if not any(n for n, _ in groups.values()):
            raise SystemExit("kernel_times.py: the two runs launch the same kernels: no steps between them")
    print(table(groups, a.steps, a.top, a.title))


if __name__ == "__main__":
    sys.exit(main())
