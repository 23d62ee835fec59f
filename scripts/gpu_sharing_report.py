#!/usr/bin/env python3
"""The report of scripts/gpu_sharing_bench.sh: per run, wall time, trials per GPU-hour,
nvidia-smi utilization, start-up and tear-down, memory, and the final losses against the
one-trial-per-GPU run; then ASHA against the full grid, and the fault run.

    gpu_sharing_report.py OUT

OUT is the bench's folder: it reads OUT/coordinator/ablate.db (read-only, beside a running
coordinator or after it), OUT/nvidia_smi.csv and OUT/worker.log, and writes OUT/trials.csv,
OUT/fault_attempts.csv and OUT/k4_curves.csv beside the report it prints.
"""
import csv
import datetime
import os
import sqlite3
import statistics
import sys

TRIALS_SQL = """SELECT s.name AS sweep, t.id, t.state, json_extract(t.axes_json, '$."optimizer.lr"') AS lr,
 json_extract(t.axes_json, '$.seed') AS seed,
 (SELECT value FROM latest_metrics WHERE trial_id = t.id AND name = 'final_val_loss') AS final,
 (SELECT value FROM latest_metrics WHERE trial_id = t.id AND name = 'startup_s') AS startup,
 (SELECT value FROM latest_metrics WHERE trial_id = t.id AND name = 'teardown_s') AS teardown,
 (SELECT value FROM latest_metrics WHERE trial_id = t.id AND name = 'start_data_s') AS s_data,
 (SELECT value FROM latest_metrics WHERE trial_id = t.id AND name = 'start_model_init_s') AS s_model,
 (SELECT value FROM latest_metrics WHERE trial_id = t.id AND name = 'start_backend_s') AS s_backend,
 (SELECT value FROM latest_metrics WHERE trial_id = t.id AND name = 'start_cuda_context_s') AS s_context,
 (SELECT value FROM latest_metrics WHERE trial_id = t.id AND name = 'start_rest_s') AS s_rest,
 (SELECT value FROM latest_metrics WHERE trial_id = t.id AND name = 'gpu_mem_peak_bytes') AS peak,
 (SELECT value FROM latest_metrics WHERE trial_id = t.id AND name = 'gpu_mem_estimate_bytes') AS estimate,
 (SELECT min(a.started_at) FROM attempts a WHERE a.trial_id = t.id) AS a_start,
 (SELECT max(a.ended_at) FROM attempts a WHERE a.trial_id = t.id) AS a_end
 FROM trials t JOIN sweeps s ON s.id = t.sweep_id ORDER BY t.id"""
FAULT_SQL = """SELECT a.trial_id, a.attempt, a.state, a.exit_code, a.gpu_share,
 substr(a.reason, 1, 90) AS reason FROM attempts a JOIN trials t ON t.id = a.trial_id
 JOIN sweeps s ON s.id = t.sweep_id WHERE s.name = 'fault' ORDER BY 1, 2"""
CURVES_SQL = """SELECT json_extract(t.axes_json, '$."optimizer.lr"') AS lr,
 json_extract(t.axes_json, '$.seed') AS seed, m.step, m.value FROM metrics m
 JOIN trials t ON t.id = m.trial_id JOIN sweeps s ON s.id = t.sweep_id
 WHERE s.name = 'k4' AND m.name = 'val_loss' ORDER BY 1, 2, 3"""


def export(db, sql, path):
    cur = db.execute(sql)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow([d[0] for d in cur.description])
        w.writerows(cur.fetchall())


def num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def main():
    out = sys.argv[1]
    db = sqlite3.connect(f"file:{out}/coordinator/ablate.db?mode=ro", uri=True)
    trials_csv, fault_csv = f"{out}/trials.csv", f"{out}/fault_attempts.csv"
    export(db, TRIALS_SQL, trials_csv)
    export(db, FAULT_SQL, fault_csv)
    export(db, CURVES_SQL, f"{out}/k4_curves.csv")
    smi_csv = f"{out}/nvidia_smi.csv"
    mps = ""
    if os.path.exists(f"{out}/worker.log"):
        mps = "\n".join([l.strip() for l in open(f"{out}/worker.log") if "MPS" in l][:3])
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
              f"{(f'{rate / base_rate:.2f}x' if base_rate else '-')} | "
              f"{statistics.mean(util) if util else float('nan'):.0f}% | "
              f"{statistics.mean(st) if st else float('nan'):.2f} | "
              f"{statistics.mean(td) if td else float('nan'):.2f} | "
              f"{same}/{len(rs)} identical (max diff {max(diffs) if diffs else float('nan'):.3g}) |")
    # Where a trial's start-up goes (the trainer's start_*_s; the CUDA context overlaps the corpus).
    for name in ["whole", "k4"]:
        rs = by.get(name, [])
        parts = {k: [num(r.get(k)) for r in rs if num(r.get(k)) is not None]
                 for k in ["s_data", "s_model", "s_backend", "s_context", "s_rest", "startup"]}
        if parts["startup"]:
            m = {k: statistics.mean(v) if v else float("nan") for k, v in parts.items()}
            print(f"\nStart-up, {name} (mean s): assignment to first step {m['startup']:.2f}; in the "
                  f"trainer: corpus {m['s_data']:.3f}, model init {m['s_model']:.3f}, backend "
                  f"{m['s_backend']:.3f}, rest {m['s_rest']:.3f}; CUDA context {m['s_context']:.3f} "
                  f"(beside the corpus); the remainder is process start, the worker and the first step.")
    mem = [(num(r["estimate"]), num(r["peak"])) for r in rows if num(r["peak"])]
    if mem:
        est = statistics.mean(m[0] for m in mem if m[0]) / 2**20
        peak = statistics.mean(m[1] for m in mem) / 2**20
        print(f"\nMemory per trial: estimate from the config {est:.0f} MiB, reported peak "
              f"(allocations + 512 MiB context allowance) {peak:.0f} MiB.")
    smi_peak = max((m for _, _, m in samples), default=0)
    print(f"nvidia-smi's largest memory.used during the runs: {smi_peak:.0f} MiB.")
    print(f"MPS (worker log): {mps if mps else 'not mentioned'}")

    def best(rs):
        cfg = {}
        for r in rs:
            cfg.setdefault(r["lr"], []).append(r)
        done = {lr: statistics.mean(num(x["final"]) for x in v) for lr, v in cfg.items()
                if all(x["state"] == "succeeded" and num(x["final"]) is not None for x in v)}
        return min(done, key=done.get) if done else None, done

    full = by.get("full") or by.get("k4")  # k4 is the same grid, shared as ASHA's
    if full and by.get("asha"):
        fa, fb = span(full)
        aa, ab = span(by["asha"])
        fbest, fvals = best(full)
        abest, avals = best(by["asha"])
        stopped = sum(1 for r in by["asha"] if r["state"] == "stopped")
        print("\n| lr sweep (12 rates x 2 seeds, 1/4 GPU each) | GPU time s | configurations run "
              "to the end | best learning rate (mean final val_loss) |")
        print("|---|---:|---:|---|")
        print(f"| full grid | {fb - fa:.1f} | {len(fvals)} | {fbest} ({fvals.get(fbest, float('nan')):.4f}) |")
        print(f"| ASHA (reduction 3, grace 256 steps) | {ab - aa:.1f} | {len(avals)} "
              f"({stopped} trials stopped) | {abest} ({avals.get(abest, float('nan')):.4f}) |")
        print(f"\nASHA / full grid GPU time: {(ab - aa) / (fb - fa):.2f}; same best trial: "
              f"{'yes' if abest == fbest else 'no'}.")
        ranked = sorted(fvals, key=fvals.get)[:4]
        print("Full grid, best four: " + ", ".join(f"{lr} {fvals[lr]:.4f}" for lr in ranked))

    if by.get("fault"):
        print("\nFault run (1/4 GPU each, the first trial faulting at step 200):\n")
        print("| trial | lr | seed | state | final val_loss = alone |")
        print("|---|---|---|---|---|")
        for r in by["fault"]:
            alone = whole.get((r["lr"], r["seed"]))
            same = "-" if num(r["final"]) is None else ("yes" if alone == num(r["final"]) else "no")
            print(f"| {r['id']} | {r['lr']} | {r['seed']} | {r['state']} | {same} |")
        if fault_csv:
            try:
                att = list(csv.DictReader(open(fault_csv)))
            except OSError:
                att = []
            print("\n| trial | attempt | state | exit | GPU share | reason |")
            print("|---|---|---|---|---|---|")
            for a in att:
                print(f"| {a['trial_id']} | {a['attempt']} | {a['state']} | {a['exit_code']} | "
                      f"1/{a['gpu_share']} | {a['reason']} |")


if __name__ == "__main__":
    main()
