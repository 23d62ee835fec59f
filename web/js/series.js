// Curve data for the charts, computed in the browser from the series API: a metric mapped to an x
// (step, tokens seen, wall seconds of training), EMA smoothing, the mean over the seeds of an arm
// with an error band, and a y-range that a diverged spike does not flatten.
import {api} from './api.js';

// x choices: `metric` is the series (reported on every step by the trainer) mapped onto the steps.
export const X_MODES = {
  step: {label: 'step', axis: 'step'},
  tokens: {label: 'tokens', axis: 'tokens', metric: 'tokens'},
  time: {label: 'wall time', axis: 'train time (s)', metric: 'train_time_s'},
};

export const BANDS = {
  se: {label: 'mean ± SE', text: 'mean ± SE (standard error of the mean)'},
  t95: {label: 'mean ± 95% t interval', text: 'mean ± 95% t interval (t(0.975, n−1) · SE)'},
};

// One trial's metric as {x, y, steps} (non-finite points dropped, x ascending), or
// {missing: name} when the trial has no points of the metric or of the x series (e.g. a trainer
// that predates train_time_s).
export async function fetchCurve(trialId, metric, xMode, points) {
  const s = await api(`trials/${trialId}/series`, {name: metric, points});
  const pts = finitePoints(s);
  if (pts.steps.length === 0) return {missing: metric};
  const xName = X_MODES[xMode]?.metric;
  if (!xName) return {x: pts.steps, y: pts.values, steps: pts.steps};
  const xs = finitePoints(await api(`trials/${trialId}/series`, {name: xName, points}));
  if (xs.steps.length === 0) return {missing: xName};
  if (xs.steps[0] > 0) {  // nothing is seen and no time has passed before step 1
    xs.steps.unshift(0);
    xs.values.unshift(0);
  }
  const x = [], y = [], steps = [];
  pts.steps.forEach((step, i) => {
    const v = interp(xs.steps, xs.values, step);
    if (x.length && v <= x[x.length - 1]) {  // equal x (a repeated step): keep the later point
      if (v < x[x.length - 1]) return;
      x.pop(), y.pop(), steps.pop();
    }
    x.push(v), y.push(pts.values[i]), steps.push(step);
  });
  return {x, y, steps};
}

function finitePoints(s) {
  const steps = [], values = [];
  (s?.steps || []).forEach((step, i) => {
    const v = s.values[i];
    if (v !== null && Number.isFinite(v)) steps.push(step), values.push(v);
  });
  return {steps, values};
}

// Linear interpolation of (xs, ys) at x (xs ascending), extrapolated from the end segments.
export function interp(xs, ys, x) {
  const n = xs.length;
  if (n === 1) return xs[0] ? (ys[0] * x) / xs[0] : ys[0];
  let lo = 0, hi = n - 1;
  if (x <= xs[0]) hi = 1;
  else if (x >= xs[n - 1]) lo = n - 2;
  else {
    while (hi - lo > 1) {  // xs[lo] <= x < xs[hi]
      const mid = (lo + hi) >> 1;
      if (xs[mid] <= x) lo = mid;
      else hi = mid;
    }
  }
  const dx = xs[hi] - xs[lo];
  return dx === 0 ? ys[lo] : ys[lo] + ((ys[hi] - ys[lo]) * (x - xs[lo])) / dx;
}

// Exponential moving average s_i = a·s_{i−1} + (1−a)·y_i, started at the first point (a = 0: y).
export function ema(y, a) {
  if (!(a > 0)) return y;
  let s = null;
  return y.map((v) => (s = s === null ? v : a * s + (1 - a) * v));
}

// Two-sided 95% Student t critical value t(0.975, df): a table to 30, Cornish-Fisher beyond.
const T975 = [12.7062, 4.30265, 3.18245, 2.77645, 2.57058, 2.44691, 2.36462, 2.30600, 2.26216,
  2.22814, 2.20099, 2.17881, 2.16037, 2.14479, 2.13145, 2.11991, 2.10982, 2.10092, 2.09302, 2.08596,
  2.07961, 2.07387, 2.06866, 2.06390, 2.05954, 2.05553, 2.05183, 2.04841, 2.04523, 2.04227];
export function t975(df) {
  if (df <= T975.length) return T975[df - 1];
  const z = 1.959964;
  return z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df * df);
}

const MAX_GRID = 600;

// The mean over the seeds of one arm, each curve {x, y} (already smoothed): on the union of the
// seeds' x values where every seed has data (from the latest first x to the earliest last x; each
// seed linearly interpolated between its own points), at most MAX_GRID of them. lo/hi: the band
// mean ∓ SE, or ∓ t(0.975, n−1)·SE (`band` 't95'); null with a single seed.
export function meanOverSeeds(curves, band) {
  const n = curves.length;
  const from = Math.max(...curves.map((c) => c.x[0]));
  const to = Math.min(...curves.map((c) => c.x[c.x.length - 1]));
  let grid = [...new Set(curves.flatMap((c) => c.x))].filter((x) => x >= from && x <= to)
      .sort((a, b) => a - b);
  if (grid.length > MAX_GRID) {
    const k = (grid.length - 1) / (MAX_GRID - 1);
    grid = Array.from({length: MAX_GRID}, (_, i) => grid[Math.round(i * k)]);
  }
  const factor = band === 't95' && n > 1 ? t975(n - 1) : 1;
  const mean = [], lo = [], hi = [];
  for (const x of grid) {
    const v = curves.map((c) => interp(c.x, c.y, x));
    const m = v.reduce((a, b) => a + b, 0) / n;
    mean.push(m);
    if (n < 2) {
      lo.push(null), hi.push(null);
      continue;
    }
    const sd = Math.sqrt(v.reduce((a, b) => a + (b - m) ** 2, 0) / (n - 1));
    const half = (factor * sd) / Math.sqrt(n);
    lo.push(m - half), hi.push(m + half);
  }
  return {x: grid, mean, lo, hi, n};
}

function quantile(sorted, q) {
  const pos = (sorted.length - 1) * q;
  const i = Math.floor(pos);
  return i + 1 < sorted.length ? sorted[i] + (sorted[i + 1] - sorted[i]) * (pos - i) : sorted[i];
}

// A y-range that a few extreme points (a diverged spike) do not flatten: the 1st–99th percentile
// of the values (in log space with `log`), widened by 25% of its span on each side. Returns
// {lo, hi, outside} when some value falls outside it, else null (the axis then shows everything).
export const ROBUST_TEXT = '1st–99th percentile of the points, widened by 25% each side';
export function robustRange(values, log = false) {
  const t = log ? (v) => Math.log10(v) : (v) => v;
  const inv = log ? (v) => 10 ** v : (v) => v;
  const vals = values.filter((v) => v !== null && Number.isFinite(v) && (!log || v > 0)).map(t)
      .sort((a, b) => a - b);
  if (vals.length < 10) return null;
  const q1 = quantile(vals, 0.01), q99 = quantile(vals, 0.99);
  const pad = 0.25 * (q99 - q1 || Math.abs(q1) || 1);
  const lo = Math.max(vals[0], q1 - pad), hi = Math.min(vals[vals.length - 1], q99 + pad);
  const outside = vals.filter((v) => v < lo || v > hi).length;
  return outside > 0 ? {lo: inv(lo), hi: inv(hi), outside} : null;
}
