#!/usr/bin/env python3
"""Markdown tables and PNG plots from the CSVs that scripts/gpu_sweeps.sh exports.

    scripts/plot_results.py RESULTS_DIR NAME [NAME...]

For each sweep NAME it reads, in RESULTS_DIR:
  NAME.csv          `ablate results NAME --format csv` (axes..., metric, mean, std, n, trials, ...)
  NAME.curves.csv   trial, state, axes..., seed, metric (loss | val_loss), step, value
  NAME.diag.csv     the same columns for attn.<layer>.<tensor>.<stat> (may be empty)
and writes:
  NAME.md           the ablation table (mean ± std over seeds) and, for sagebwd trials, the mean
                    relative L2 error of every attention tensor per layer and the largest logit
  NAME.loss.png     train loss (moving average) and validation loss of every trial, one colour per
                    configuration (seeds share it); x is training tokens when tokens_per_step is an axis
  NAME.diag.png     rel_l2 per tensor per layer (log scale), one panel per sagebwd configuration

The tables need only the standard library; the PNGs need matplotlib (Debian python3-matplotlib) and
are skipped with a note when it is missing, so the CSVs can be drawn later on another machine.
Exit status: 0 ok, 2 usage error or a missing/unreadable results CSV.
"""
import csv
import math
import os
import statistics
import sys

TENSORS = ["o", "p", "dv", "ds", "dq", "dk"]  # forward first, then backward in dataflow order
FIXED = {"trial", "state", "metric", "step", "value", "seed"}


def read_csv(path):
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def short(axis):
    return axis.rsplit(".", 1)[-1]


def independent_axes(axes, rows, determined=False):
    """Drops an axis whose values pair one to one with an earlier kept axis (a zip partner), or,
    with determined=True, any axis whose value follows from the kept axes before it (a per-row
    setting such as the learning rate of a zip over family and p)."""
    kept = []
    for a in axes:
        drop = False
        if determined and kept:
            seen = {}
            drop = all(seen.setdefault(tuple(r[k] for k in kept), r[a]) == r[a] for r in rows)
        for k in [] if drop else kept:
            fwd, bwd = {}, {}
            if all(fwd.setdefault(r[k], r[a]) == r[a] and bwd.setdefault(r[a], r[k]) == r[k]
                   for r in rows):
                drop = True
                break
        if not drop:
            kept.append(a)
    return kept


def fmt(x, digits=4):
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.{digits}f}"


def results_table(name, rows):
    if not rows:
        return [f"(no results for {name})", ""]
    cols = list(rows[0].keys())
    axes = cols[: cols.index("metric")]
    keep = independent_axes(axes, rows)
    metric = rows[0]["metric"]
    out = ["| " + " | ".join(keep) + f" | {metric} mean ± std | n / trials | min | max |",
           "|" + "---|" * (len(keep) + 4)]
    finite = [float(r["mean"]) for r in rows if r["mean"] not in ("", "nan")]
    best = min(finite) if finite else None
    for r in rows:
        mean = float(r["mean"]) if r["mean"] not in ("", "nan") else None
        cell = "-" if mean is None else f"{mean:.4f} ± {float(r['std'] or 'nan'):.4f}"
        if best is not None and mean == best:
            cell = f"**{cell}**"
        mn = float(r["min"]) if r.get("min") not in (None, "", "nan") else None
        mx = float(r["max"]) if r.get("max") not in (None, "", "nan") else None
        out.append("| " + " | ".join(r[a] for a in keep) +
                   f" | {cell} | {r['n']} / {r['trials']} | {fmt(mn)} | {fmt(mx)} |")
    out.append("")
    return out


def axis_columns(rows):
    return [c for c in rows[0].keys() if c not in FIXED] if rows else []


def group_label(row, keep):
    return ", ".join(f"{short(a)}={row[a]}" for a in keep)


def curves(rows):
    """{trial: {"row": first row, "loss": [(step, v)], "val_loss": [(step, v)]}}"""
    by = {}
    for r in rows:
        t = by.setdefault(r["trial"], {"row": r, "loss": [], "val_loss": []})
        if r["value"] not in ("", "nan") and r["metric"] in t:
            t[r["metric"]].append((int(r["step"]), float(r["value"])))
    return by


def moving_average(values, window):
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= window:
            acc -= values[i - window]
        out.append(acc / min(i + 1, window))
    return out


def diag_summary(rows, keep):
    """{label: {layer: {tensor: [rel_l2...], "max_logit": [...]}}} over steps and seeds."""
    out = {}
    for r in rows:
        if r["value"] in ("", "nan"):
            continue
        if "attention.kind" in r and r["attention.kind"] != "sagebwd":
            continue
        parts = r["metric"].split(".")
        if len(parts) == 4 and parts[3] == "rel_l2":
            key = parts[2]
        elif len(parts) == 3 and parts[2] == "max_logit":
            key = "max_logit"
        else:
            continue
        lay = out.setdefault(group_label(r, keep), {}).setdefault(int(parts[1]), {})
        lay.setdefault(key, []).append(float(r["value"]))
    return out


def diag_table(summary):
    out = []
    for label, layers in summary.items():
        out.append(f"{label}: mean relative L2 error vs exact attention (over diagnostics "
                   "steps and seeds); max_logit: largest |logit| seen")
        out.append("")
        out.append("| layer | " + " | ".join(TENSORS) + " | max_logit |")
        out.append("|" + "---|" * (len(TENSORS) + 2))
        for layer in sorted(layers):
            d = layers[layer]
            cells = [fmt(statistics.fmean(d[t]), 4) if d.get(t) else "-" for t in TENSORS]
            ml = fmt(max(d["max_logit"]), 1) if d.get("max_logit") else "-"
            out.append(f"| {layer} | " + " | ".join(cells) + f" | {ml} |")
        out.append("")
    return out


def plot_loss(plt, name, by, keep, path):
    """Columns: one per combination of the axes after the first; colour: the first (main) axis.
    A main-axis value that occurs under one combination only (a reference such as fpa in the
    smoothing sweep) is drawn, dashed, in every column."""
    main, rest = keep[0], keep[1:]
    panel_of = lambda r: ", ".join(f"{short(a)}={r[a]}" for a in rest) or name
    mains = sorted({t["row"][main] for t in by.values()})
    panels = sorted({panel_of(t["row"]) for t in by.values()})
    where = {m: {panel_of(t["row"]) for t in by.values() if t["row"][main] == m} for m in mains}
    cmap = plt.get_cmap("tab10")
    colour = {m: cmap(i % 10) for i, m in enumerate(mains)}
    tokens_axis = "train.tokens_per_step"
    n = len(panels)
    fig, axes = plt.subplots(2, n, figsize=(4.2 * n + 1.5, 7.5), squeeze=False, sharey="row")
    tops, lows = [[], []], [[], []]
    labelled = set()
    for t in by.values():
        r = t["row"]
        scale = float(r[tokens_axis]) if tokens_axis in r else 1.0
        m = r[main]
        reference = len(where[m]) == 1 and n > 1
        cols = range(n) if reference else [panels.index(panel_of(r))]
        for c in cols:
            for row, metric in enumerate(("loss", "val_loss")):
                if not t[metric]:
                    continue
                steps, values = zip(*sorted(t[metric]))
                if metric == "loss":
                    values = moving_average(list(values), max(1, len(values) // 40))
                kw = {"color": colour[m], "alpha": 0.85, "linewidth": 1.0,
                      "linestyle": "--" if reference else "-"}
                if metric == "val_loss":
                    kw["marker"] = "."
                if (c, m) not in labelled and row == 1:
                    kw["label"] = f"{short(main)}={m}" + (" (reference)" if reference else "")
                    labelled.add((c, m))
                axes[row][c].plot([s * scale for s in steps], values, **kw)
                tops[row].append(values[len(values) // 10])
                lows[row].append(min(values))
    xlabel = "training tokens" if tokens_axis in next(iter(by.values()))["row"] else "step"
    for c, panel in enumerate(panels):
        for row, what in enumerate(("train loss (moving average)", "validation loss")):
            ax = axes[row][c]
            ax.set_title(f"{panel}\n{what}", fontsize=8)
            ax.set_xlabel(xlabel, fontsize=8)
            ax.grid(alpha=0.3)
            if tops[row]:
                ax.set_ylim(min(lows[row]) - 0.03, max(tops[row]) + 0.05)
        axes[1][c].legend(fontsize=7, loc="upper right")
    axes[0][0].set_ylabel("nats per byte")
    axes[1][0].set_ylabel("nats per byte")
    fig.suptitle(f"{name} (every seed drawn; colour: {main})")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_diag(plt, name, summary, path):
    n = len(summary)
    fig, axes = plt.subplots(1, n, figsize=(4.5 * n + 1, 4.5), squeeze=False, sharey=True)
    for ax, (label, layers) in zip(axes[0], summary.items()):
        ls = sorted(layers)
        width = 0.8 / len(TENSORS)
        for j, tname in enumerate(TENSORS):
            vals = [statistics.fmean(layers[l][tname]) if layers[l].get(tname) else float("nan")
                    for l in ls]
            ax.bar([i + (j - len(TENSORS) / 2 + 0.5) * width for i in range(len(ls))], vals,
                   width, label=tname)
        ax.set_xticks(range(len(ls)))
        ax.set_xticklabels([f"layer {l}" for l in ls])
        ax.set_yscale("log")
        ax.set_title(label, fontsize=9)
        ax.grid(alpha=0.3, axis="y")
    axes[0][0].set_ylabel("relative L2 error vs exact (mean)")
    axes[0][-1].legend(fontsize=8)
    fig.suptitle(f"{name}: SageBwd attention error per tensor and layer")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv):
    if len(argv) < 3 or argv[1] in ("-h", "--help"):
        print(__doc__, file=sys.stderr)
        return 2
    results, names = argv[1], argv[2:]
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        plt = None
        print("plot_results: matplotlib missing (Debian: python3-matplotlib): tables only",
              file=sys.stderr)
    for name in names:
        base = os.path.join(results, name)
        if not os.path.exists(base + ".csv"):
            print(f"plot_results: {base}.csv missing", file=sys.stderr)
            return 2
        table = read_csv(base + ".csv")
        curve_rows = read_csv(base + ".curves.csv")
        diag_rows = read_csv(base + ".diag.csv")
        axes = [a for a in axis_columns(curve_rows or diag_rows) if a != "seed"]
        keep = independent_axes(axes, curve_rows or diag_rows, determined=True)
        md = [f"## {name}", ""] + results_table(name, table)
        by = curves(curve_rows)
        summary = diag_summary(diag_rows, keep)
        if plt is not None and by:
            plot_loss(plt, name, by, keep, base + ".loss.png")
            md += [f"![{name} loss curves]({name}.loss.png)", ""]
        if summary:
            md += diag_table(summary)
            if plt is not None:
                plot_diag(plt, name, summary, base + ".diag.png")
                md += [f"![{name} attention errors]({name}.diag.png)", ""]
        with open(base + ".md", "w") as f:
            f.write("\n".join(md))
        print(f"plot_results: wrote {base}.md" + (" and PNGs" if plt is not None else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
