// Line charts on uPlot (web/node_modules/uplot, installed by `npm ci` in web/; scripts/setup.sh
// does it). uPlot is loaded lazily so the tables keep working when it is missing.
import {h, replace, fmtNum} from './util.js';

let uPlotPromise = null;
function loadUPlot() {
  uPlotPromise ??= import('../node_modules/uplot/dist/uPlot.esm.js').then((m) => m.default);
  return uPlotPromise;
}

// Colour-blind-friendly categorical palette (Okabe-Ito order, then Tableau's extras).
export const PALETTE = ['#0072b2', '#e69f00', '#009e73', '#cc79a7', '#56b4e9', '#d55e00',
  '#7f7f7f', '#bcbd22', '#8c564b', '#17becf', '#000000', '#f0e442'];
export const colorFor = (i) => PALETTE[i % PALETTE.length];
const DASHES = [[], [6, 3], [2, 2], [8, 3, 2, 3], [12, 4]];
export const dashFor = (i) => DASHES[i % DASHES.length];

// Draws a line chart into `container` (replacing its content):
//   series: [{label, color, steps: [...], values: [...], dash?, width?, lo?, hi?}]
// `steps` are the x values (steps, tokens or seconds). Series may have different x sets (they are
// joined on the union; gaps are spanned). `lo` / `hi` (same length as `values`) draw a band in the
// series' colour behind the lines. `yRange: [lo, hi]` fixes the y axis; `notes` (text or nodes)
// go under the title. Hovering lists every series' value at the cursor's x (± the band's half
// width), the series nearest the cursor in bold. Returns {destroy()}.
export async function lineChart(container, {title, series, xLabel = 'step', yLabel = '',
  height = 260, logY = false, yRange = null, notes = null, noteId = null}) {
  const box = h('div', {class: 'chart-canvas'});
  const readout = h('div', {class: 'chart-readout', 'aria-hidden': 'true'}, '\u00a0');
  const fig = h('figure', {class: 'chart', 'aria-label': title || yLabel},
      title ? h('figcaption', {}, title) : null,
      notes ? h('p', {class: 'chart-notes', id: noteId}, notes) : null, box, readout);
  replace(container, fig);
  const drawable = series.filter((s) => s.steps.length > 0);
  if (drawable.length === 0) {
    box.append(h('p', {class: 'muted empty'}, 'no points yet'));
    return {destroy() {}};
  }
  let uPlot;
  try {
    uPlot = await loadUPlot();
  } catch (e) {
    box.append(h('p', {class: 'error'},
        'charts unavailable: uPlot is not installed (run `npm ci` in web/; scripts/setup.sh does)'));
    return {destroy() {}};
  }
  const clean = (vals) => vals.map(
      (v) => (v === null || !Number.isFinite(v) || (logY && v <= 0) ? null : v));
  // Band edges first (their fills are drawn before, so under, every line), then the lines.
  const banded = drawable.filter((s) => s.lo && s.hi);
  const tables = [];
  const uSeries = [{label: xLabel}];
  const bands = [];
  const edgeOf = new Map();  // drawable series -> [hi index, lo index] in uPlot's series
  for (const s of banded) {
    const i = uSeries.length;
    for (const [edge, vals] of [['hi', s.hi], ['lo', s.lo]]) {
      tables.push([s.steps, clean(vals)]);
      uSeries.push({label: `${s.label} ${edge}`, stroke: 'rgba(0,0,0,0)', width: 1, spanGaps: true,
        points: {show: false}});
    }
    bands.push({series: [i, i + 1], fill: `${s.color}38`});
    edgeOf.set(s, [i, i + 1]);
  }
  const lineIdx = [];
  for (const s of drawable) {
    lineIdx.push(uSeries.length);
    tables.push([s.steps, clean(s.values)]);
    uSeries.push({label: s.label, stroke: s.color, width: s.width ?? 1.5, dash: s.dash, spanGaps: true,
      // Sparse series (evals, diagnostics) get dots: a single point draws no line.
      points: {show: s.steps.length <= 40, size: 5, fill: s.color}});
  }
  const data = uPlot.join(tables);
  // First and last defined index of every line: the readout shows "-" outside them.
  const extent = lineIdx.map((i) => {
    const a = data[i];
    let f = 0, l = a.length - 1;
    while (f < a.length && (a[f] === null || a[f] === undefined)) f++;
    while (l >= 0 && (a[l] === null || a[l] === undefined)) l--;
    return [f, l];
  });
  let focused = null;
  const width = () => Math.max(240, box.clientWidth || container.clientWidth || 600);
  const showReadout = (u) => {
    const idx = u.cursor.idx;
    if (idx === null || idx === undefined) {
      readout.textContent = '\u00a0';
      return;
    }
    const items = drawable.map((s, k) => {
      const i = lineIdx[k];
      const [f, l] = extent[k];
      const j = idx < f || idx > l ? -1 : nearestIdx(u.data[i], idx);
      const v = j >= 0 ? u.data[i][j] : null;
      const e = edgeOf.get(s);
      const half = j >= 0 && e && u.data[e[0]][j] !== null && u.data[e[1]][j] !== null ?
        (u.data[e[0]][j] - u.data[e[1]][j]) / 2 : null;
      return h('li', {class: i === focused ? 'focused' : null},
          h('span', {class: 'swatch', style: `background:${s.color}`}), `${s.label}: `,
          h('b', {}, fmtNum(v)), half !== null ? ` ± ${fmtNum(half)}` : null);
    });
    replace(readout, h('span', {class: 'x'}, `${xLabel} ${fmtNum(u.data[0][idx])}`), h('ul', {}, items));
  };
  const opts = {
    width: width(),
    height,
    legend: {show: false},
    cursor: {focus: {prox: 24}, drag: {x: true, y: false}},
    focus: {alpha: 0.25},
    scales: {x: {time: false}, y: {...(logY ? {distr: 3} : {}), ...(yRange ? {range: yRange} : {})}},
    axes: [
      {label: xLabel, stroke: '#555', grid: {stroke: '#eee'}, ticks: {stroke: '#ddd'}},
      {label: yLabel, stroke: '#555', grid: {stroke: '#eee'}, ticks: {stroke: '#ddd'},
        size: 64, ...(logY ? {} : {values: (u, ticks) => fmtTicks(ticks)})},
    ],
    series: uSeries,
    bands,
    hooks: {
      setSeries: [(u, i) => {
        focused = lineIdx.includes(i) ? i : null;
      }],
      setCursor: [showReadout],
    },
  };
  const plot = new uPlot(opts, data, box);
  const ro = new ResizeObserver(() => {
    const w = width();
    if (Math.abs(w - plot.width) > 2) plot.setSize({width: w, height});
  });
  ro.observe(box);
  return {destroy() {
    ro.disconnect();
    plot.destroy();
  }};
}

function nearestIdx(arr, idx) {
  for (let d = 0; d < arr.length; d++) {
    if (idx - d >= 0 && arr[idx - d] !== null && arr[idx - d] !== undefined) return idx - d;
    if (idx + d < arr.length && arr[idx + d] !== null && arr[idx + d] !== undefined) return idx + d;
  }
  return -1;
}

// Tick labels with as many decimals as the tick spacing needs (0.99975, 0.9998, ... stay distinct).
function fmtTicks(ticks) {
  const finite = ticks.filter((v) => v !== null && Number.isFinite(v));
  const max = Math.max(0, ...finite.map(Math.abs));
  if (max !== 0 && (max < 1e-3 || max >= 1e6)) return ticks.map((v) => (v === null ? '' : v.toExponential(1)));
  let step = Infinity;
  for (let i = 1; i < finite.length; i++) step = Math.min(step, Math.abs(finite[i] - finite[i - 1]) || Infinity);
  const decimals = Number.isFinite(step) ? Math.min(8, Math.max(0, Math.ceil(-Math.log10(step) - 1e-9))) : 2;
  return ticks.map((v) => (v === null ? '' : v.toFixed(decimals)));
}

// A legend built from [{label, color, dash?, count?}], as a list (screen readers read it).
export function legend(items) {
  return h('ul', {class: 'legend'}, items.map((it) => h('li', {},
      h('span', {class: 'swatch', style: `background:${it.color}`, 'aria-hidden': 'true'}),
      it.label, it.count !== undefined ? h('span', {class: 'muted'}, ` (${it.count})`) : null)));
}
