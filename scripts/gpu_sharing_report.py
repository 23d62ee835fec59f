#!/usr/bin/env python3
"""The report of scripts/gpu_sharing_bench.sh: per run, wall time, trials per GPU-hour,
nvidia-smi utilization, start-up and tear-down, memory, and the final losses against the
one-trial-per-GPU run; then ASHA against the full grid.

    gpu_sharing_report.py TRIALS.csv NVIDIA_SMI.csv MPS.txt
"""
import csv
import datetime
import statistics
import sys


def num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def main():
    trials_csv, smi_csv, mps_txt = sys.argv[1:4]
    rows = list(csv.DictReader(open(trials_csv)))
    samples = []
    for line in open(smi_csv):
        f = [x.strip() for x in line.split(",")]
        try:
            t = datetime.datetime.strptime(f[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            samples.append((t, float(f[2].split()[0]), float(f[3].split()[0])))
        except (ValueError, IndexError):
            continue
    by = {}
    for r in rows:
        by.setdefault(r["sweep"], []).append(r)

    def span(rs):
        starts = [num(r["a_start"]) for r in rs if num(r["a_start"])]
        ends = [num(r["a_end"]) for r in rs if num(r["a_end"])]
        return (min(starts), max(ends)) if starts and ends else (0, 0)

    whole = {(r["lr"], r["seed"]): num(r["final"]) for r in by.get("whole", [])}
    base_rate = None
    print("| run | GPU share per trial | trials | wall s | trials / GPU-hour | vs one per GPU "
          "| nvidia-smi util | startup s (mean) | teardown s (mean) | final loss = alone |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    share = {"whole": "1", "k2": "1/2", "k4": "1/4", "k8": "1/8", "full": "1/4", "asha": "1/4"}
    for name in ["whole", "k2", "k4", "k8"]:
        rs = by.get(name)
        if not rs:
            continue
        a, b = span(rs)
        wall = b - a
        rate = len(rs) / (wall / 3600) if wall > 0 else float("nan")
        if name == "whole":
            base_rate = rate
        util = [u for t, u, m in samples if a <= t <= b]
        st = [num(r["startup"]) for r in rs if num(r["startup"]) is not None]
        td = [num(r["teardown"]) for r in rs if num(r["teardown"]) is not None]
        same = sum(1 for r in rs if whole.get((r["lr"], r["seed"])) == num(r["final"]))
        diffs = [abs(num(r["final"]) - whole[(r["lr"], r["seed"])]) for r in rs
                 if num(r["final"]) is not None and whole.get((r["lr"], r["seed"])) is not None]
        ok = sum(1 for r in rs if r["state"] == "succeeded")
        print(f"| {name} | {share[name]} | {ok}/{len(rs)} | {wall:.1f} | {rate:,.0f} | "
              f"{rate / base_rate:.2f}x | {statistics.mean(util) if util else float('nan'):.0f}% | "
              f"{statistics.mean(st) if st else float('nan'):.2f} | "
              f"{statistics.mean(td) if td else float('nan'):.2f} | "
              f"{same}/{len(rs)} identical (max diff {max(diffs) if diffs else float('nan'):.3g}) |")
    mem = [(num(r["estimate"]), num(r["peak"])) for r in rows if num(r["peak"])]
    if mem:
        est = statistics.mean(m[0] for m in mem if m[0]) / 2**20
        peak = statistics.mean(m[1] for m in mem) / 2**20
        print(f"\nMemory per trial: estimate from the config {est:.0f} MiB, reported peak "
              f"(allocations + 512 MiB context allowance) {peak:.0f} MiB.")
    smi_peak = max((m for _, _, m in samples), default=0)
    print(f"nvidia-smi's largest memory.used during the runs: {smi_peak:.0f} MiB.")
    mps = open(mps_txt).read().strip()
    print(f"MPS (worker log): {mps if mps else 'not mentioned'}")

    def best(rs):
        cfg = {}
        for r in rs:
            cfg.setdefault(r["lr"], []).append(r)
        done = {lr: statistics.mean(num(x["final"]) for x in v) for lr, v in cfg.items()
                if all(x["state"] == "succeeded" and num(x["final"]) is not None for x in v)}
        return min(done, key=done.get) if done else None, done

    if by.get("full") and by.get("asha"):
        fa, fb = span(by["full"])
        aa, ab = span(by["asha"])
        fbest, fvals = best(by["full"])
        abest, avals = best(by["asha"])
        stopped = sum(1 for r in by["asha"] if r["state"] == "stopped")
        print("\n| lr sweep (12 rates x 2 seeds, 1/4 GPU each) | GPU time s | configurations run "
              "to the end | best learning rate (mean final val_loss) |")
        print("|---|---:|---:|---|")
        print(f"| full grid | {fb - fa:.1f} | {len(fvals)} | {fbest} ({fvals.get(fbest, float('nan')):.4f}) |")
        print(f"| ASHA (reduction 3, grace 128 steps) | {ab - aa:.1f} | {len(avals)} "
              f"({stopped} trials stopped) | {abest} ({avals.get(abest, float('nan')):.4f}) |")
        print(f"\nASHA / full grid GPU time: {(ab - aa) / (fb - fa):.2f}; same best trial: "
              f"{'yes' if abest == fbest else 'no'}.")


if __name__ == "__main__":
    main()
