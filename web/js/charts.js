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
//   series: [{label, color, steps: [...], values: [...], dash?, width?}]
// Series may have different step sets (they are joined on the union of steps; gaps are spanned).
// Returns {destroy()}. A hover readout under the chart names the series nearest the cursor.
export async function lineChart(container, {title, series, xLabel = 'step', yLabel = '',
  height = 260, logY = false}) {
  const box = h('div', {class: 'chart-canvas'});
  const readout = h('div', {class: 'chart-readout', 'aria-hidden': 'true'}, '\u00a0');
  const fig = h('figure', {class: 'chart', 'aria-label': title || yLabel},
      title ? h('figcaption', {}, title) : null, box, readout);
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
  const data = uPlot.join(drawable.map((s) => [s.steps, s.values.map(
      (v) => (v === null || !Number.isFinite(v) || (logY && v <= 0) ? null : v))]));
  let focused = null;
  const width = () => Math.max(240, box.clientWidth || container.clientWidth || 600);
  const opts = {
    width: width(),
    height,
    legend: {show: false},
    cursor: {focus: {prox: 24}, drag: {x: true, y: false}},
    focus: {alpha: 0.25},
    scales: {x: {time: false}, y: logY ? {distr: 3} : {}},
    axes: [
      {label: xLabel, stroke: '#555', grid: {stroke: '#eee'}, ticks: {stroke: '#ddd'}},
      {label: yLabel, stroke: '#555', grid: {stroke: '#eee'}, ticks: {stroke: '#ddd'},
        size: 64, ...(logY ? {} : {values: (u, ticks) => fmtTicks(ticks)})},
    ],
    series: [{label: xLabel}, ...drawable.map((s) => ({
      label: s.label, stroke: s.color, width: s.width ?? 1.5, dash: s.dash, spanGaps: true,
      // Sparse series (evals, diagnostics) get dots: a single point draws no line.
      points: {show: s.steps.length <= 40, size: 5, fill: s.color},
    }))],
    hooks: {
      setSeries: [(u, i) => {
        focused = i;
      }],
      setCursor: [(u) => {
        const idx = u.cursor.idx;
        if (idx === null || idx === undefined) {
          readout.textContent = '\u00a0';
          return;
        }
        const step = u.data[0][idx];
        const i = focused ?? (drawable.length === 1 ? 1 : null);
        if (!i) {
          readout.textContent = `${xLabel} ${step}`;
          return;
        }
        const v = nearest(u.data[i], idx);
        readout.textContent = `${drawable[i - 1].label} · ${xLabel} ${step}: ${fmtNum(v)}`;
      }],
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

function nearest(arr, idx) {
  for (let d = 0; d < arr.length; d++) {
    if (idx - d >= 0 && arr[idx - d] !== null && arr[idx - d] !== undefined) return arr[idx - d];
    if (idx + d < arr.length && arr[idx + d] !== null && arr[idx + d] !== undefined) {
      return arr[idx + d];
    }
  }
  return null;
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
