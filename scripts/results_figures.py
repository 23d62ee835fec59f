#!/usr/bin/env python3
"""The figures and interval tables of docs/RESULTS.md, from the data files in docs/results/.

    scripts/results_figures.py [--data docs/results] [--out docs/results]

Reads, in --data:
  gpu_sweeps_cells.csv   sweep, cell, mean, std, n: the recorded GPU sweeps' final validation
                         loss per configuration (mean and sample std over n seeds)
  probe_synthetic.json   `ablate-train --probe all` (no checkpoint: synthetic inputs)
  probe_checkpoint.json  `ablate-train --probe all --resume CKPT` (live layers and bias-noise)
  gpu_seed_spread_trials.csv / _curves.csv  examples/sweeps/gpu_seed_spread.yaml's trials (final
                         val loss per seed) and curves (loss, val_loss by step)
and writes, in --out:
  comparisons.md         every contrast RESULTS.md reads, as difference, 95% interval and the
                         smallest difference the cells could detect (below)
  intervals.svg          those contrasts with their intervals (a forest plot)
  sigma.svg              the error of dQ, dK, O against sigma (probe, synthetic) and dS's own
                         INT8 rounding error
  decompose.svg          dQ's and dK's error with one product in INT8 at a time, sigma 1 and 8
  bias_noise.svg         the gradient's quantization bias and its minibatch noise against tokens
                         per step (log-log), with the crossover
  seed_spread.svg        the seed-spread sweep's validation loss by step: each kind's mean over
                         seeds with a band of +-1 sd
  seed_spread.md         its paired (by seed) sagebwd - fpa difference, 95% t interval and the
                         smallest difference detectable at 80% power
  spectral_lr.svg        the spectral study's final loss against each arm's learning rates
  studies_intervals.svg  every contrast of studies.md with its paired interval (a forest plot)
  studies.md             the powered studies (examples/sweeps/gpu_study_*.yaml; per-trial final
                         validation loss in gpu_study_*_trials.csv, from `ablate export`): each
                         arm at its best learning rate, and the contrasts RESULTS.md reads, paired
                         by seed (below)

Studies: an arm is a configuration but for its learning rate. Its best rate is the one with the
lowest mean over the seeds that finished at every rate of the arm (so each rate is judged on the
same seeds); "edge" marks a best rate at the end of the arm's grid. A contrast a - b pairs the two
arms' chosen rates by seed, on the seeds both have: the mean difference, its 95% t interval and
(t(0.975, n-1) + t(0.80, n-1)) sd/sqrt(n), the smallest difference detectable at 80% power. The
rates are chosen on the seeds they are then tested on: optimistic, as the page says.

Intervals: the seeds are not paired in the stored cells (means and stds only), so a contrast
a - b is Welch's: se = sqrt(sa^2/na + sb^2/nb), df by Welch-Satterthwaite, 95% interval
d +- t(0.975, df) se. The smallest detectable difference at 80% power is
(t(0.975, df) + t(0.80, df)) se. Only the standard library is used; the SVGs are written by hand
(deterministic text, so they diff cleanly).
"""
import argparse
import csv
import json
import math
import os
import sys


# ---- Student's t from the regularized incomplete beta (Numerical Recipes' continued fraction) --
def _betacf(a, b, x):
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > 1e-300 else 1e-300)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > 1e-300 else 1e-300)
        c = 1.0 + aa / c if abs(c) > 1e-300 else 1e300
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > 1e-300 else 1e-300)
        c = 1.0 + aa / c if abs(c) > 1e-300 else 1e300
        de = d * c
        h *= de
        if abs(de - 1.0) < 1e-15:
            break
    return h


def _betai(a, b, x):
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lbt = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log(1 - x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(lbt) * _betacf(a, b, x) / a
    return 1.0 - math.exp(lbt) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t, df):
    x = df / (df + t * t)
    p = 0.5 * _betai(df / 2.0, 0.5, x)
    return 1.0 - p if t > 0 else p


def t_quantile(q, df):
    lo, hi = -1e4, 1e4
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < q:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def welch(a, b):
    va, vb = a["std"] ** 2 / a["n"], b["std"] ** 2 / b["n"]
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va ** 2 / (a["n"] - 1) + vb ** 2 / (b["n"] - 1)) if se > 0 else 1.0
    tc = t_quantile(0.975, df)
    d = a["mean"] - b["mean"]
    return {"d": d, "lo": d - tc * se, "hi": d + tc * se, "se": se, "df": df,
            "mdd": (tc + t_quantile(0.80, df)) * se}


# The contrasts RESULTS.md reads: (finding, label, sweep, cell a, cell b); the difference is a - b.
CONTRASTS = [
    ("SageBwd iii", "sagebwd - fpa, QK-norm, 8K tokens/step", "gpu_sage_qknorm_tokens",
     "sagebwd qk_norm=true tps=8192", "fpa qk_norm=true tps=8192"),
    ("SageBwd iii", "sagebwd - fpa, QK-norm, 64K tokens/step", "gpu_sage_qknorm_tokens",
     "sagebwd qk_norm=true tps=65536", "fpa qk_norm=true tps=65536"),
    ("SageBwd i", "sagebwd - fpa, no QK-norm, 8K", "gpu_sage_qknorm_tokens",
     "sagebwd qk_norm=false tps=8192", "fpa qk_norm=false tps=8192"),
    ("SageBwd i", "sagebwd - fpa, no QK-norm, 64K", "gpu_sage_qknorm_tokens",
     "sagebwd qk_norm=false tps=65536", "fpa qk_norm=false tps=65536"),
    ("QK-norm", "fpa: no QK-norm - QK-norm, 64K", "gpu_sage_qknorm_tokens",
     "fpa qk_norm=false tps=65536", "fpa qk_norm=true tps=65536"),
    ("QK-norm", "sagebwd: no QK-norm - QK-norm, 64K", "gpu_sage_qknorm_tokens",
     "sagebwd qk_norm=false tps=65536", "sagebwd qk_norm=true tps=65536"),
    ("SageBwd iv", "sagebwd: no smoothing - K-smoothing", "gpu_sage_smoothing", "sagebwd none",
     "sagebwd K"),
    ("SageBwd iv", "sagebwd: Q+K - K-smoothing", "gpu_sage_smoothing", "sagebwd Q+K", "sagebwd K"),
    ("BeyondMuon 1", "momentum - rms, p = 1", "gpu_optimizer_p", "momentum p=1", "rms p=1"),
    ("BeyondMuon 1", "momentum - rms, p = 1/2", "gpu_optimizer_p", "momentum p=0.5", "rms p=0.5"),
    ("BeyondMuon 1", "momentum - rms, p = 1/4", "gpu_optimizer_p", "momentum p=0.25",
     "rms p=0.25"),
    ("BeyondMuon 2", "momentum: p = 1 - p = 0", "gpu_optimizer_p", "momentum p=1", "momentum p=0"),
    ("BeyondMuon 3", "Muon - AdamW", "gpu_state_bits", "muon 32-bit", "adamw 32-bit"),
    ("8-bit Muon", "Muon: 8-bit - 32-bit", "gpu_state_bits", "muon 8-bit", "muon 32-bit"),
    ("8-bit Muon", "AdamS: 8-bit - 32-bit", "gpu_state_bits", "adams 8-bit", "adams 32-bit"),
    ("8-bit Muon", "AdamW: 8-bit - 32-bit", "gpu_state_bits", "adamw 8-bit", "adamw 32-bit"),
]


# ---- the powered studies -----------------------------------------------------------------------
def _bits(kind, bits, code=None):
    """An arm of the 8-bit study: optimizer kind, state bits and (8-bit) code."""
    arm = {"optimizer.kind": kind, "optimizer.state_bits": bits}
    if code:
        arm["optimizer.state_quant"] = code
    return arm


def _sm(kind, offset, smooth_k, smooth_q, dq_correction):
    """An arm of the smoothing study: attention kind, key offset and the three switches."""
    return {"attention.kind": kind, "attention.k_offset": offset, "attention.smooth_k": smooth_k,
            "attention.smooth_q": smooth_q, "attention.dq_correction": dq_correction}


# (finding, label, arm a, arm b): arms as {axis: value} over every axis but seed, each at its best
# learning rate unless the arm names optimizer.lr; the difference is a - b.
STUDY_CONTRASTS = {
    "gpu_study_spectral_p": [
        ("BeyondMuon 1", "momentum - rms, p = 1", {"optimizer.family": "momentum", "optimizer.p": "1"},
         {"optimizer.family": "rms", "optimizer.p": "1"}),
        ("BeyondMuon 1", "momentum - rms, p = 1/2",
         {"optimizer.family": "momentum", "optimizer.p": "0.5"},
         {"optimizer.family": "rms", "optimizer.p": "0.5"}),
        ("BeyondMuon 1", "momentum - rms, p = 1/4",
         {"optimizer.family": "momentum", "optimizer.p": "0.25"},
         {"optimizer.family": "rms", "optimizer.p": "0.25"}),
        ("BeyondMuon 1", "momentum - rms, p = 0", {"optimizer.family": "momentum", "optimizer.p": "0"},
         {"optimizer.family": "rms", "optimizer.p": "0"}),
        ("BeyondMuon 2", "momentum: p = 1/2 - p = 1",
         {"optimizer.family": "momentum", "optimizer.p": "0.5"},
         {"optimizer.family": "momentum", "optimizer.p": "1"}),
        ("BeyondMuon 2", "momentum: p = 0 - p = 1", {"optimizer.family": "momentum", "optimizer.p": "0"},
         {"optimizer.family": "momentum", "optimizer.p": "1"}),
        ("BeyondMuon 2", "rms: p = 1/2 - p = 1", {"optimizer.family": "rms", "optimizer.p": "0.5"},
         {"optimizer.family": "rms", "optimizer.p": "1"}),
        ("BeyondMuon 2", "rms: p = 0 - p = 1", {"optimizer.family": "rms", "optimizer.p": "0"},
         {"optimizer.family": "rms", "optimizer.p": "1"}),
        ("BeyondMuon 3", "Muon - Adam", {"optimizer.family": "momentum", "optimizer.p": "0"},
         {"optimizer.family": "rms", "optimizer.p": "1"}),
        ("BeyondMuon 3", "Muon - AdamZ (rms, p = 0)",
         {"optimizer.family": "momentum", "optimizer.p": "0"},
         {"optimizer.family": "rms", "optimizer.p": "0"}),
    ],
    "gpu_study_attention": [
        ("SageBwd iii", f"sagebwd - fpa, {qk}, {tps} tokens/step",
         {"attention.kind": "sagebwd", "attention.qk_norm": q, "train.tokens_per_step": t},
         {"attention.kind": "fpa", "attention.qk_norm": q, "train.tokens_per_step": t})
        for q, qk in (("true", "QK-norm"), ("false", "no QK-norm"))
        for t, tps in (("16384", "16K"), ("131072", "128K"))
    ] + [
        ("SageBwd i", f"stress (no QK-norm, lr {lr}, 3x its best): sagebwd - fpa, {tps} tokens/step",
         {"attention.kind": "sagebwd", "attention.qk_norm": "false", "train.tokens_per_step": t,
          "optimizer.lr": lr},
         {"attention.kind": "fpa", "attention.qk_norm": "false", "train.tokens_per_step": t,
          "optimizer.lr": lr})
        for t, tps, lr in (("16384", "16K", "0.006"), ("131072", "128K", "0.018"))
    ] + [
        ("QK-norm", f"{k}: no QK-norm - QK-norm, {tps} tokens/step",
         {"attention.kind": k, "attention.qk_norm": "false", "train.tokens_per_step": t},
         {"attention.kind": k, "attention.qk_norm": "true", "train.tokens_per_step": t})
        for k in ("fpa", "sagebwd") for t, tps in (("16384", "16K"), ("131072", "128K"))
    ],
    "gpu_study_smoothing": [
        ("SageBwd iv", f"{label} (keys offset 8)", _sm("sagebwd", "8", *a), _sm(*b))
        for label, a, b in (
            ("sagebwd: no smoothing - K-smoothing", ("false", "false", "false"),
             ("sagebwd", "8", "true", "false", "false")),
            ("sagebwd: Q+K - K-smoothing", ("true", "true", "false"),
             ("sagebwd", "8", "true", "false", "false")),
            ("sagebwd, K-smoothing: dQ correction on - off", ("true", "false", "true"),
             ("sagebwd", "8", "true", "false", "false")),
            ("sagebwd K-smoothing - fpa", ("true", "false", "false"),
             ("fpa", "8", "true", "false", "false")),
            ("sagebwd no smoothing - fpa", ("false", "false", "false"),
             ("fpa", "8", "true", "false", "false")),
        )
    ] + [
        ("SageBwd iv", "fpa: keys offset 8 - no offset", _sm("fpa", "8", "true", "false", "false"),
         _sm("fpa", "0", "true", "false", "false")),
    ],
    "gpu_study_state_bits": [
        ("8-bit Muon", f"{name}: 8-bit {code}{' (m and v)' if kind == 'adamw' and code == 'linear' else ''}"
         " - 32-bit", _bits(kind, "8", code), _bits(kind, "32"))
        for kind, name in (("adamw", "AdamW"), ("spectral", "Muon")) for code in ("dynamic", "linear")
    ] + [
        ("8-bit Muon", "Muon 8-bit linear - AdamW 8-bit linear", _bits("spectral", "8", "linear"),
         _bits("adamw", "8", "linear")),
    ],
}
STUDY_SKIP = {"trial_id", "state", "attempt", "seed", "final_val_loss"}


def paired(d):
    """Mean, 95% t interval and the detectable difference of paired differences d (n >= 2)."""
    n = len(d)
    mean = sum(d) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    se = sd / math.sqrt(n)
    tc = t_quantile(0.975, n - 1)
    return {"d": mean, "lo": mean - tc * se, "hi": mean + tc * se, "sd": sd,
            "mdd": (tc + t_quantile(0.80, n - 1)) * se, "n": n}


def load_study(path, axes):
    """trial rows -> ({(arm, lr): {seed: final val loss}}, {arm: axes}, {(arm, lr): diverged seeds},
    {arm: every rate of its grid}); an arm is the tuple of (axis, value) but the rate."""
    cells, arms, diverged, grid = {}, {}, {}, {}
    with open(path) as f:
        for r in csv.DictReader(f):
            arm = tuple((k, r[k]) for k in axes if k != "optimizer.lr")
            lr = r.get("optimizer.lr", "")
            arms[arm] = dict(arm)
            grid.setdefault(arm, set()).add(lr)
            if r["state"] == "diverged":
                diverged.setdefault((arm, lr), set()).add(r["seed"])
            if r["state"] != "succeeded" or not r.get("final_val_loss"):
                continue
            cells.setdefault((arm, lr), {})[r["seed"]] = float(r["final_val_loss"])
    return cells, arms, diverged, grid


def best_rates(cells, arms, grid):
    """Each arm's best rate: among its rates with two or more finished seeds (the candidates), the
    lowest mean over the seeds every candidate has; grid: arm -> every rate it was given."""
    out = {}
    for arm in arms:
        rates = sorted({lr for (a, lr) in cells if a == arm}, key=float)
        cand = [lr for lr in rates if len(cells[(arm, lr)]) >= 2] or rates
        common = set.intersection(*(set(cells[(arm, lr)]) for lr in cand)) if cand else set()
        if not common:
            continue
        means = {lr: sum(cells[(arm, lr)][s] for s in common) / len(common) for lr in cand}
        best = min(means, key=means.get)
        full = sorted(grid.get(arm, rates), key=float)
        edge = len(full) > 1 and best in (full[0], full[-1])
        # A rate with one seed that beat the choice on that seed: the best is not pinned down.
        beaten = [lr for lr in rates if lr not in cand and any(
            v < cells[(arm, best)][sd] for sd, v in cells[(arm, lr)].items() if sd in cells[(arm, best)])]
        out[arm] = {"lr": best, "mean": means[best], "seeds": sorted(common, key=int),
                    "edge": edge, "rates": rates, "grid": full, "beaten": beaten,
                    "all_means": {lr: sum(cells[(arm, lr)].values()) / len(cells[(arm, lr)])
                                  for lr in rates},
                    "n": {lr: len(cells[(arm, lr)]) for lr in rates}}
    return out


def study_tables(data_dir, contrasts_out=None):
    """The markdown of studies.md, or "" when no study's trials are in data_dir; each contrast with
    an interval is also appended to contrasts_out (when given) as {label, d, lo, hi}."""
    out = []
    for name, contrasts in STUDY_CONTRASTS.items():
        path = os.path.join(data_dir, f"{name}_trials.csv")
        if not os.path.exists(path):
            continue
        with open(path) as f:
            header = next(csv.reader(f))
        axes = [h for h in header if h not in STUDY_SKIP and
                (h.startswith(("optimizer.", "attention.", "train.", "model.")))]
        cells, arms, diverged, grid = load_study(path, axes)
        best = best_rates(cells, arms, grid)
        shown = [k for k in axes if k != "optimizer.lr"]
        out.append(f"## {name}\n")
        out.append("| " + " | ".join(shown) + " | best lr | mean final val loss | seeds | lr grid "
                   "(mean over its finished seeds, n) |")
        out.append("|" + "---|" * len(shown) + "---|---:|---:|---|")
        for arm in sorted(arms, key=lambda a: [v for _, v in a]):
            def rate_txt(lr):
                bits = []
                if (arm, lr) in cells:
                    bits.append(f"{sum(cells[(arm, lr)].values()) / len(cells[(arm, lr)]):.4f} "
                                f"(n {len(cells[(arm, lr)])})")
                if (arm, lr) in diverged:
                    bits.append(f"diverged {len(diverged[(arm, lr)])}")
                return f"{lr}: " + (", ".join(bits) if bits else "-")
            grid_txt = "; ".join(rate_txt(lr) for lr in sorted(grid[arm], key=float))
            b = best.get(arm)
            if b is None:
                out.append("| " + " | ".join(v for _, v in arm) + f" | - | - | 0 | {grid_txt} |")
                continue
            flag = " (edge)" if b["edge"] else ""
            if b["beaten"]:
                flag += " (lower on one seed at " + ", ".join(b["beaten"]) + ")"
            out.append("| " + " | ".join(v for _, v in arm) +
                       f" | {b['lr']}{flag} | {b['mean']:.4f} | {len(b['seeds'])} | {grid_txt} |")
        out.append("")
        out.append("| finding | contrast (a - b), each at its best lr | seeds | difference | "
                   "95% interval | detectable at 80% | sd of differences |")
        out.append("|---|---|---:|---:|---|---:|---:|")
        for finding, label, qa, qb in contrasts:
            def find(q):  # the arm, at its best rate or at the rate the query names
                m = [a for a in best if all(dict(a).get(k) == v for k, v in q.items()
                                            if k != "optimizer.lr")]
                return m[0] if len(m) == 1 else None

            def rate(arm, q):
                return q.get("optimizer.lr", best[arm]["lr"])
            a, b = find(qa), find(qb)
            if a is None or b is None:
                div = []
                for q in (qa, qb):
                    arm = [x for x in arms if all(dict(x).get(k) == v for k, v in q.items())]
                    n = sum(len(v) for (x, _), v in diverged.items() if arm and x == arm[0])
                    if n:
                        div.append(f"{n} seeds of {'a' if q is qa else 'b'} diverged")
                out.append(f"| {finding} | {label} | 0 | - | {'; '.join(div) or 'not run'} | - | - |")
                continue
            ca, cb = cells.get((a, rate(a, qa)), {}), cells.get((b, rate(b, qb)), {})
            seeds = sorted(set(ca) & set(cb), key=int)
            if len(seeds) < 2:
                out.append(f"| {finding} | {label} | {len(seeds)} | - | too few seeds | - | - |")
                continue
            r = paired([ca[s] - cb[s] for s in seeds])
            note = " (includes 0)" if r["lo"] <= 0 <= r["hi"] else ""
            if contrasts_out is not None:
                contrasts_out.append({"label": f"{name[len('gpu_study_'):]}: {label}", **r})
            out.append(f"| {finding} | {label} | {r['n']} | {r['d']:+.4f} | "
                       f"[{r['lo']:+.4f}, {r['hi']:+.4f}]{note} | {r['mdd']:.4f} | {r['sd']:.4f} |")
        out.append("")
    return "\n".join(out)


# ---- SVG -----------------------------------------------------------------------------------------
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]


def esc(s):
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class Svg:
    def __init__(self, w, h):
        self.w, self.h, self.items = w, h, []

    def add(self, s):
        self.items.append(s)

    def text(self, x, y, s, size=12, anchor="start", color="#000"):
        self.add(f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
                 f'fill="{color}">{esc(s)}</text>')

    def line(self, x1, y1, x2, y2, color="#000", width=1.0, dash=None):
        d = f' stroke-dasharray="{dash}"' if dash else ""
        self.add(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{color}" '
                 f'stroke-width="{width}"{d}/>')

    def polyline(self, pts, color, width=2.0, dash=None):
        d = f' stroke-dasharray="{dash}"' if dash else ""
        p = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
        self.add(f'<polyline points="{p}" fill="none" stroke="{color}" stroke-width="{width}"{d}/>')

    def circle(self, x, y, r, color):
        self.add(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r}" fill="{color}"/>')

    def rect(self, x, y, w, h, color):
        self.add(f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" fill="{color}"/>')

    def write(self, path):
        with open(path, "w") as f:
            f.write(f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.w}" height="{self.h}" '
                    f'viewBox="0 0 {self.w} {self.h}" font-family="sans-serif">\n')
            f.write(f'<rect width="{self.w}" height="{self.h}" fill="#fff"/>\n')
            for it in self.items:
                f.write(it + "\n")
            f.write("</svg>\n")


def axes(svg, x0, y0, x1, y1, xt, yt, xlabel, ylabel, title):
    """Frame, ticks (lists of (value_position_px, label)) and labels."""
    svg.line(x0, y1, x1, y1)
    svg.line(x0, y0, x0, y1)
    for px, lab in xt:
        svg.line(px, y1, px, y1 + 4)
        svg.text(px, y1 + 16, lab, 11, "middle")
    for py, lab in yt:
        svg.line(x0 - 4, py, x0, py)
        svg.line(x0, py, x1, py, "#e5e5e5")
        svg.text(x0 - 6, py + 4, lab, 11, "end")
    svg.text((x0 + x1) / 2, y1 + 34, xlabel, 12, "middle")
    svg.add(f'<text x="14" y="{(y0 + y1) / 2:.1f}" font-size="12" text-anchor="middle" '
            f'transform="rotate(-90 14 {(y0 + y1) / 2:.1f})">{esc(ylabel)}</text>')
    svg.text((x0 + x1) / 2, y0 - 10, title, 13, "middle")


def log_ticks(lo, hi):
    out = []
    e = math.floor(math.log10(lo))
    while 10 ** e <= hi * 1.0001:
        if 10 ** e >= lo * 0.9999:
            out.append(10 ** e)
        e += 1
    return out


def fmt_tick(v):
    if v >= 1e6:
        return f"{v / 1e6:.2g}M"
    if v >= 1e3:
        return f"{v / 1e3:.3g}K"
    return f"{v:g}"


def line_plot(path, series, xlabel, ylabel, title, logx=False, logy=False, vlines=(),
              legend_at="topleft", zero_based=True):
    """series: [(label, [(x, y)], color, dash)]; vlines: [(x, label)], labelled left of the line;
    zero_based=False: a linear y axis over the data's range (with a margin) instead of from 0."""
    W, H = 640, 400
    x0, y0, x1, y1 = 70, 40, 620, 330
    xs = [x for _, pts, _, _ in series for x, _ in pts]
    ys = [y for _, pts, _, _ in series for _, y in pts if y > 0 or not logy]
    xlo, xhi, ylo, yhi = min(xs), max(xs), min(ys), max(ys)
    if logy:
        ylo, yhi = 10 ** math.floor(math.log10(ylo)), 10 ** math.ceil(math.log10(yhi))
    elif zero_based:
        ylo, yhi = 0.0, yhi * 1.1
    else:
        pad = 0.08 * (yhi - ylo)
        ylo, yhi = ylo - pad, yhi + 3 * pad  # room above for the legend
    if logx:
        xlo, xhi = 10 ** math.floor(math.log10(xlo)), 10 ** math.ceil(math.log10(xhi))

    def fx(x):
        if logx:
            return x0 + (math.log10(x) - math.log10(xlo)) / (math.log10(xhi) - math.log10(xlo)) * (x1 - x0)
        return x0 + (x - xlo) / (xhi - xlo) * (x1 - x0)

    def fy(y):
        if logy:
            y = max(y, ylo)
            return y1 - (math.log10(y) - math.log10(ylo)) / (math.log10(yhi) - math.log10(ylo)) * (y1 - y0)
        return y1 - (y - ylo) / (yhi - ylo) * (y1 - y0)

    svg = Svg(W, H)
    xt = [(fx(v), fmt_tick(v)) for v in (log_ticks(xlo, xhi) if logx else sorted(set(xs)))]
    if logy:
        yt = [(fy(v), f"{v:g}") for v in log_ticks(ylo, yhi)]
    else:
        step = (yhi - ylo) / 5
        yt = [(fy(ylo + i * step), f"{ylo + i * step:.{2 if zero_based else 3}g}") for i in range(6)]
    axes(svg, x0, y0, x1, y1, xt, yt, xlabel, ylabel, title)
    for k, (vx, vlabel) in enumerate(vlines):
        svg.line(fx(vx), y0, fx(vx), y1, "#888", 1, "4,3")
        svg.text(fx(vx) - 4, y1 - 8 - 14 * k, vlabel, 11, "end", "#555")
    for i, (label, pts, color, dash) in enumerate(series):
        svg.polyline([(fx(x), fy(y)) for x, y in pts], color, 2, dash)
        for x, y in pts:
            svg.circle(fx(x), fy(y), 2.5, color)
        lx = x0 + 12 if legend_at == "topleft" else x1 - 230
        ly = y0 + 16 + 16 * i
        svg.line(lx, ly - 4, lx + 22, ly - 4, color, 2, dash)
        svg.text(lx + 28, ly, label, 11)
    svg.write(path)


def band_plot(path, groups, xlabel, ylabel, title):
    """groups: [(label, color, [(x, mean, sd)])]: a line for the mean, a band of +-1 sd."""
    W, H = 640, 400
    x0, y0, x1, y1 = 70, 40, 620, 330
    xs = [x for _, _, pts in groups for x, _, _ in pts]
    lo = min(m - sd for _, _, pts in groups for _, m, sd in pts)
    hi = max(m + sd for _, _, pts in groups for _, m, sd in pts)
    pad = (hi - lo) * 0.05
    lo, hi = lo - pad, hi + pad
    xlo, xhi = min(xs), max(xs)

    def fx(x):
        return x0 + (x - xlo) / (xhi - xlo) * (x1 - x0)

    def fy(y):
        return y1 - (y - lo) / (hi - lo) * (y1 - y0)

    svg = Svg(W, H)
    step = (hi - lo) / 5
    axes(svg, x0, y0, x1, y1, [(fx(x), f"{x:g}") for x in sorted(set(xs))],
         [(fy(lo + i * step), f"{lo + i * step:.3f}") for i in range(6)], xlabel, ylabel, title)
    for i, (label, color, pts) in enumerate(groups):
        upper = [(fx(x), fy(m + sd)) for x, m, sd in pts]
        lower = [(fx(x), fy(m - sd)) for x, m, sd in reversed(pts)]
        poly = " ".join(f"{x:.1f},{y:.1f}" for x, y in upper + lower)
        svg.add(f'<polygon points="{poly}" fill="{color}" fill-opacity="0.18" stroke="none"/>')
        svg.polyline([(fx(x), fy(m)) for x, m, _ in pts], color, 2)
        ly = y0 + 16 + 16 * i
        svg.line(x1 - 250, ly - 4, x1 - 228, ly - 4, color, 2)
        svg.text(x1 - 222, ly, label, 11)
    svg.write(path)


def forest(path, rows, title="Recorded GPU sweeps: differences of final val loss (nats/byte), "
           "95% Welch intervals", x0=330):
    W = x0 + 430
    H = 60 + 26 * len(rows) + 40
    x1 = W - 20
    lo = min(r["lo"] for r in rows)
    hi = max(r["hi"] for r in rows)
    span = max(abs(lo), abs(hi)) * 1.05
    lo, hi = -span, span

    def fx(v):
        return x0 + (v - lo) / (hi - lo) * (x1 - x0)

    svg = Svg(W, H)
    svg.text(W / 2, 24, title, 13, "middle")
    ybot = 50 + 26 * len(rows)
    svg.line(fx(0), 40, fx(0), ybot, "#444", 1, "4,3")
    for i, r in enumerate(rows):
        y = 56 + 26 * i
        svg.text(x0 - 10, y + 4, r["label"], 11, "end")
        clipped_lo, clipped_hi = max(r["lo"], lo), min(r["hi"], hi)
        color = "#1f77b4" if r["lo"] > 0 or r["hi"] < 0 else "#999999"
        svg.line(fx(clipped_lo), y, fx(clipped_hi), y, color, 2)
        svg.circle(fx(r["d"]), y, 3.5, color)
    for v in [lo, lo / 2, 0, hi / 2, hi]:
        svg.line(fx(v), ybot, fx(v), ybot + 4)
        svg.text(fx(v), ybot + 16, f"{v:+.2f}" if v else "0", 11, "middle")
    svg.text(x0, ybot + 32, "blue: the interval excludes 0; grey: no detectable difference", 11)
    svg.write(path)


def bars(path, groups, title):
    """groups: [(group label, [(bar label, dq, dk)])]."""
    W, H = 760, 420
    x0, y0, x1, y1 = 70, 40, 740, 300
    ymax = max(max(dq, dk) for _, bs in groups for _, dq, dk in bs) * 1.1

    def fy(v):
        return y1 - v / ymax * (y1 - y0)

    svg = Svg(W, H)
    n = sum(len(bs) for _, bs in groups) + len(groups) - 1
    slot = (x1 - x0) / n
    step = ymax / 5
    axes(svg, x0, y0, x1, y1, [], [(fy(i * step), f"{i * step:.2g}") for i in range(6)], "",
         "relative L2 error vs exact", title)
    i = 0
    for g, (glabel, bs) in enumerate(groups):
        gx = x0 + i * slot
        for blabel, dq, dk in bs:
            bx = x0 + i * slot
            w = slot * 0.38
            svg.rect(bx + slot * 0.1, fy(dq), w, y1 - fy(dq), COLORS[0])
            svg.rect(bx + slot * 0.1 + w, fy(dk), w, y1 - fy(dk), COLORS[1])
            svg.add(f'<text x="{bx + slot / 2:.1f}" y="{y1 + 10:.1f}" font-size="10" '
                    f'text-anchor="end" transform="rotate(-40 {bx + slot / 2:.1f} {y1 + 10:.1f})">'
                    f'{esc(blabel)}</text>')
            i += 1
        svg.text((gx + x0 + i * slot) / 2, y0 + 14, glabel, 12, "middle")
        i += 1
    svg.rect(x0 + 10, y1 + 90, 12, 10, COLORS[0])
    svg.text(x0 + 26, y1 + 99, "dQ", 11)
    svg.rect(x0 + 60, y1 + 90, 12, 10, COLORS[1])
    svg.text(x0 + 76, y1 + 99, "dK", 11)
    svg.write(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default="docs/results")
    ap.add_argument("--out", default="docs/results")
    a = ap.parse_args()
    cells = {}
    path = os.path.join(a.data, "gpu_sweeps_cells.csv")
    try:
        with open(path) as f:
            for r in csv.DictReader(f):
                cells[(r["sweep"], r["cell"])] = {"mean": float(r["mean"]), "std": float(r["std"]),
                                                  "n": int(r["n"])}
    except (OSError, KeyError, ValueError) as e:
        print(f"results_figures: {path}: {e}", file=sys.stderr)
        return 2
    rows = []
    for finding, label, sweep, ca, cb in CONTRASTS:
        w = welch(cells[(sweep, ca)], cells[(sweep, cb)])
        w.update({"finding": finding, "label": label, "sweep": sweep,
                  "n": f"{cells[(sweep, ca)]['n']}/{cells[(sweep, cb)]['n']}"})
        rows.append(w)
    with open(os.path.join(a.out, "comparisons.md"), "w") as f:
        f.write("| finding | contrast (a - b) | seeds | difference | 95% interval | detectable at 80% |\n"
                "|---|---|---|---:|---|---:|\n")
        for r in rows:
            verdict = "" if r["lo"] > 0 or r["hi"] < 0 else " (includes 0)"
            f.write(f"| {r['finding']} | {r['label']} | {r['n']} | {r['d']:+.4f} | "
                    f"[{r['lo']:+.4f}, {r['hi']:+.4f}]{verdict} | {r['mdd']:.4f} |\n")
    forest(os.path.join(a.out, "intervals.svg"), rows)

    syn = json.load(open(os.path.join(a.data, "probe_synthetic.json")))
    sig = syn["sigma"]
    line_plot(os.path.join(a.out, "sigma.svg"),
              [("dQ", [(r["sigma"], r["dq"]) for r in sig], COLORS[0], None),
               ("dK", [(r["sigma"], r["dk"]) for r in sig], COLORS[1], None),
               ("O", [(r["sigma"], r["o"]) for r in sig], COLORS[2], None),
               ("dS (upstream)", [(r["sigma"], r["ds"]) for r in sig], COLORS[3], "5,3"),
               ("dS after its own INT8 rounding (rows)",
                [(r["sigma"], r["ds_int8_rows"]) for r in sig], COLORS[4], "2,3")],
              "sigma of Q and K", "relative L2 error vs exact attention",
              "SageBwd emulator vs exact attention (synthetic, N %d, D %d)" %
              (syn["shape"]["N"], syn["shape"]["D"]), logy=True)
    groups = []
    for d in syn["decompose"]:
        groups.append((d["label"], [(r["products"].replace(" only", "").replace(" (production)", ""),
                                     r["dq"], r["dk"]) for r in d["rows"][:6]]))
    bars(os.path.join(a.out, "decompose.svg"), groups,
         "Error by product: one INT8 product at a time (emulator, synthetic)")

    ck_path = os.path.join(a.data, "probe_checkpoint.json")
    if os.path.exists(ck_path):
        ck = json.load(open(ck_path))
        bn = ck["bias_noise"]
        pts = [(r["tokens_per_step"], r["noise"]) for r in bn["rows"]]
        series = [("minibatch noise (sd)", pts, COLORS[0], None)]
        if bn["bias_sq"] > 0:
            b = math.sqrt(bn["bias_sq"])
            series.append(("quantization bias |E[g_sage - g_fpa]|",
                           [(pts[0][0], b), (pts[-1][0], b)], COLORS[1], "5,3"))
        cross = bn.get("crossover_tokens_per_step")
        line_plot(os.path.join(a.out, "bias_noise.svg"), series, "tokens per step",
                  "gradient norm", "Bias against noise (checkpoint %s)" %
                  os.path.basename(ck.get("checkpoint", "")), logx=True, logy=True,
                  vlines=[(262144, "the paper's 260K"), (2097152, "2.1M")] +
                  ([(cross, "crossover %s" % fmt_tick(cross))] if cross else []),
                  legend_at="topright")
    trials_path = os.path.join(a.data, "gpu_seed_spread_trials.csv")
    if os.path.exists(trials_path):
        with open(trials_path) as f:
            tr = list(csv.DictReader(f))
        final = {(r["attention.kind"], r["seed"]): float(r["final_val_loss"]) for r in tr
                 if r["state"] == "succeeded"}
        seeds = sorted({s for k, s in final if (("fpa", s) in final and ("sagebwd", s) in final)})
        d = [final[("sagebwd", s)] - final[("fpa", s)] for s in seeds]
        n = len(d)
        mean = sum(d) / n
        sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
        se = sd / math.sqrt(n)
        tc = t_quantile(0.975, n - 1)
        mdd = (tc + t_quantile(0.80, n - 1)) * se

        def spread(kind):
            v = [final[(kind, s)] for s in seeds]
            m = sum(v) / len(v)
            return m, math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1))
        with open(os.path.join(a.out, "seed_spread.md"), "w") as f:
            f.write("| attention | final val loss, mean | sd over seeds | seeds |\n|---|---:|---:|---:|\n")
            for kind in ("fpa", "sagebwd"):
                m, s_ = spread(kind)
                f.write(f"| {kind} | {m:.4f} | {s_:.4f} | {n} |\n")
            f.write(f"\nsagebwd - fpa, paired by seed: {mean:+.4f} "
                    f"[{mean - tc * se:+.4f}, {mean + tc * se:+.4f}] (95% t, {n - 1} df); "
                    f"detectable at 80% power: {mdd:.4f}\n")
        with open(os.path.join(a.data, "gpu_seed_spread_curves.csv")) as f:
            cur = [r for r in csv.DictReader(f) if r["metric"] == "val_loss"]
        groups = []
        for kind, color in (("fpa", COLORS[0]), ("sagebwd", COLORS[1])):
            by_step = {}
            for r in cur:
                if r["attention.kind"] == kind:
                    by_step.setdefault(int(r["step"]), []).append(float(r["value"]))
            pts = []
            for st in sorted(by_step):
                v = by_step[st]
                m = sum(v) / len(v)
                pts.append((st, m, math.sqrt(sum((x - m) ** 2 for x in v) / max(1, len(v) - 1))))
            groups.append((f"{kind}: mean, band +-1 sd ({len(by_step[max(by_step)])} seeds)", color,
                           pts))
        band_plot(os.path.join(a.out, "seed_spread.svg"), groups, "step", "validation loss (nats/byte)",
                  "20M-parameter GPT, seq 1024, 65,536 tokens/step (gpu_seed_spread)")
    spectral = os.path.join(a.data, "gpu_study_spectral_p_trials.csv")
    if os.path.exists(spectral):
        with open(spectral) as f:
            header = next(csv.reader(f))
        axes = [h for h in header if h.startswith("optimizer.")]
        cells, arms, _, _ = load_study(spectral, axes)
        series = []
        for fam, dash in (("rms", None), ("momentum", "5,3")):
            for i, p in enumerate(("1", "0.5", "0.25", "0")):
                arm = (("optimizer.family", fam), ("optimizer.p", p))
                pts = sorted((float(lr), sum(v.values()) / len(v)) for (x, lr), v in cells.items()
                             if x == arm)
                if pts:
                    series.append((f"{fam}, p = {p}", pts, COLORS[i], dash))
        line_plot(os.path.join(a.out, "spectral_lr.svg"), series, "learning rate (matrices)",
                  "final validation loss (nats/token), mean over seeds",
                  "Spectral family x p against the learning rate (gpu_study_spectral_p)",
                  logx=True, legend_at="topleft", zero_based=False)
    contrasts = []
    studies = study_tables(a.data, contrasts)
    if studies:
        with open(os.path.join(a.out, "studies.md"), "w") as f:
            f.write("<!-- scripts/results_figures.py from gpu_study_*_trials.csv -->\n" + studies)
        forest(os.path.join(a.out, "studies_intervals.svg"), contrasts,
               "Powered studies: differences of final val loss (nats/token), each arm at its best "
               "lr, 95% paired t intervals", x0=560)
    print("wrote", ", ".join(sorted(f for f in os.listdir(a.out) if f.endswith((".svg", ".md")))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
