// Curves of one metric for the trials matching the filters, one colour per value of the chosen
// axis. Two ways to draw them (`agg`):
//   mean    one line per arm (the trials sharing every axis value but `seed`): the mean over its
//           seeds with a band (± SE or ± 95% t interval), where every seed of the arm has data;
//   trials  every trial its own line; the seeds of a value share its colour, each arm (or seed)
//           its own dash pattern.
// x is the step, the tokens seen or the wall seconds of training (the trainer's `tokens` and
// `train_time_s` series mapped onto the metric's steps); an optional EMA smooths each trial before
// averaging; the y axis is clipped to a robust range when a few points (a spike) would flatten it.
// The chart says all of that in its notes. At most `cap` trials are fetched (one downsampled series
// each, two with tokens or time), and the view says so. #curves-chart carries the drawn arms as
// JSON in data-agg (mean mode) for the tests.
import {api} from '../api.js';
import {h, replace, axisCompare, mapLimit, errorBox, fmtNum} from '../util.js';
import {lineChart, legend, colorFor, dashFor} from '../charts.js';
import {X_MODES, BANDS, ROBUST_TEXT, fetchCurve, ema, meanOverSeeds, robustRange} from '../series.js';

const CAPS = [8, 16, 32, 64, 100];
const PICKS = {
  first: {label: 'first by id', sort: 'id', order: 'asc'},
  best: {label: 'best val_loss', sort: 'val_loss', order: 'asc'},
  recent: {label: 'most recently started', sort: 'started_at', order: 'desc'},
};
const POINTS = 300;

// EMA factor from the query: 0 ≤ a ≤ 0.99.
export function parseEma(v) {
  const a = Number(v);
  return Number.isFinite(a) ? Math.min(0.99, Math.max(0, a)) : 0;
}

export function curvesView(container, ctx) {
  const {sweep} = ctx;
  const controls = h('div', {class: 'controls'});
  const chartBox = h('div', {id: 'curves-chart'});
  const legendBox = h('div', {});
  const note = h('p', {class: 'muted small', id: 'curves-note', 'aria-live': 'polite'});
  replace(container, h('h2', {}, 'Curves'), controls, chartBox, legendBox, note);
  let chart = null;
  let last = null;  // the fetched curves: controls that only change the drawing redraw them

  const nonSeedAxes = sweep.axes.filter((a) => a !== 'seed');
  const state = () => {
    const s = ctx.getState();
    return {
      metric: s.cmetric || 'loss',
      color: sweep.axes.includes(s.color) ? s.color : (nonSeedAxes[0] || sweep.axes[0] || ''),
      cap: CAPS.includes(Number(s.cap)) ? Number(s.cap) : 32,
      pick: PICKS[s.pick] ? s.pick : 'first',
      log: s.log === '1',
      agg: s.agg === 'trials' || s.agg === 'mean' ? s.agg : (sweep.axes.includes('seed') ? 'mean' : 'trials'),
      band: BANDS[s.band] ? s.band : 'se',
      x: X_MODES[s.x] ? s.x : 'step',
      ema: parseEma(s.ema),
      yr: s.yr === 'full' ? 'full' : 'robust',
    };
  };

  const renderControls = () => {
    const st = state();
    const set = (key, value, refetch) => {
      ctx.setState({[key]: value});
      renderControls();
      refetch ? load() : redraw();
    };
    const select = (id, key, options, value, refetch) => h('select', {id,
      onchange: (e) => set(key, e.target.value, refetch)},
    options.map(([v, label]) => h('option', {value: v, selected: v === value}, label)));
    replace(controls,
        h('label', {for: 'curves-metric'}, 'metric '),
        ctx.metricSelect('curves-metric', st.metric, (v) => set('cmetric', v, true), {series: true}),
        h('label', {for: 'curves-x'}, 'x '),
        select('curves-x', 'x', Object.entries(X_MODES).map(([k, m]) => [k, m.label]), st.x, true),
        h('label', {for: 'curves-agg'}, 'draw '),
        select('curves-agg', 'agg', [['mean', 'mean over seeds'], ['trials', 'each trial']], st.agg),
        st.agg === 'mean' ? [h('label', {for: 'curves-band'}, 'band '),
          select('curves-band', 'band', Object.entries(BANDS).map(([k, b]) => [k, b.label]), st.band)] : null,
        h('label', {for: 'curves-ema'}, 'EMA '),
        h('input', {id: 'curves-ema', type: 'number', min: 0, max: 0.99, step: 0.01, value: st.ema,
          title: 'smoothing factor 0..0.99, applied to each trial before averaging (0: none)',
          onchange: (e) => set('ema', parseEma(e.target.value) || null)}),
        h('label', {for: 'curves-color'}, 'colour by '),
        select('curves-color', 'color', sweep.axes.map((a) => [a, a]), st.color),
        h('label', {for: 'curves-pick'}, 'trials '),
        select('curves-pick', 'pick', Object.entries(PICKS).map(([k, p]) => [k, p.label]), st.pick, true),
        h('label', {for: 'curves-cap'}, 'at most '),
        select('curves-cap', 'cap', CAPS.map((c) => [String(c), String(c)]), String(st.cap), true),
        h('label', {for: 'curves-yr'}, 'y range '),
        select('curves-yr', 'yr', [['robust', 'robust'], ['full', 'full']], st.yr),
        h('label', {class: 'check'}, h('input', {type: 'checkbox', id: 'curves-log', checked: st.log,
          onchange: (e) => set('log', e.target.checked ? '1' : null)}), 'log y'));
  };

  let seq = 0;
  const load = async () => {
    const my = ++seq;
    const st = state();
    const pick = PICKS[st.pick];
    try {
      const page = await api(`sweeps/${sweep.id}/trials`, {
        offset: 0, limit: st.cap, sort: pick.sort, order: pick.order,
        // Queued trials have no points: leave them out unless a state filter is set.
        ...{state: 'running,succeeded,failed,diverged,canceled'}, ...ctx.filterParams()});
      const curves = await mapLimit(page.trials, 4, (t) =>
        fetchCurve(t.id, st.metric, st.x, POINTS).catch(() => ({missing: st.metric})));
      if (my !== seq) return;
      last = {metric: st.metric, x: st.x, trials: page.trials, curves, total: page.total};
      redraw();
    } catch (e) {
      if (my === seq) replace(chartBox, errorBox(e));
    }
  };

  const redraw = () => {
    if (!last) return;
    const st = state();
    const {trials, curves, total} = last;
    const have = trials.map((t, i) => ({t, c: curves[i]})).filter(({c}) => c.x);
    const missingX = curves.filter((c) => c.missing && c.missing !== last.metric).length;
    const values = [...new Set(have.map(({t}) => t.axes?.[st.color] ?? '-'))].sort(axisCompare);
    const colorIdx = new Map(values.map((v, i) => [v, i]));
    const counts = new Map();
    const lines = [];
    const armKey = (t) => nonSeedAxes.map((a) => t.axes?.[a] ?? '-');
    const seedIdx = new Map();  // each trial's line: a dash pattern per seed
    let agg = null;
    if (st.agg === 'mean') {
      const arms = new Map();
      for (const {t, c} of have) {
        const k = JSON.stringify(armKey(t));
        if (!arms.has(k)) arms.set(k, {keys: armKey(t), colorValue: t.axes?.[st.color] ?? '-', trials: [], curves: []});
        arms.get(k).trials.push(t.id);
        arms.get(k).curves.push({x: c.x, y: ema(c.y, st.ema)});
      }
      agg = [...arms.values()].sort((a, b) => {
        for (let i = 0; i < a.keys.length; i++) {
          const c = axisCompare(a.keys[i], b.keys[i]);
          if (c) return c;
        }
        return 0;
      }).map((arm) => ({...arm, ...meanOverSeeds(arm.curves, st.band)}));
      const colorDash = new Map();
      for (const arm of agg) {
        counts.set(arm.colorValue, (counts.get(arm.colorValue) || 0) + 1);
        const i = colorDash.get(arm.colorValue) || 0;
        colorDash.set(arm.colorValue, i + 1);
        const label = nonSeedAxes.map((a, j) => `${a}=${arm.keys[j]}`).join(' ') || 'all trials';
        lines.push({label: `${label} (n=${arm.n})`, color: colorFor(colorIdx.get(arm.colorValue)),
          dash: dashFor(i), width: 2, steps: arm.x, values: arm.mean,
          lo: arm.n > 1 ? arm.lo : null, hi: arm.n > 1 ? arm.hi : null});
      }
      chartBox.dataset.agg = JSON.stringify({metric: last.metric, x: last.x, ema: st.ema, band: st.band,
        arms: agg.map(({keys, trials: ids, x, mean, lo, hi, n}) => ({keys, trials: ids, n, x, mean, lo, hi}))});
    } else {
      delete chartBox.dataset.agg;
      for (const {t, c} of have) {
        const v = t.axes?.[st.color] ?? '-';
        const seed = t.axes?.seed ?? '';
        if (!seedIdx.has(seed)) seedIdx.set(seed, seedIdx.size);
        counts.set(v, (counts.get(v) || 0) + 1);
        const others = Object.entries(t.axes || {}).filter(([k]) => k !== st.color)
            .map(([k, x]) => `${k}=${x}`).join(' ');
        lines.push({label: `#${t.id} ${st.color}=${v} ${others}`, color: colorFor(colorIdx.get(v)),
          dash: dashFor(seedIdx.get(seed)), steps: c.x, values: ema(c.y, st.ema)});
      }
    }
    const allY = lines.flatMap((l) => [...l.values, ...(l.lo || []), ...(l.hi || [])]);
    const clip = st.yr === 'robust' ? robustRange(allY, st.log) : null;
    const seeds = agg ? [...new Set(agg.map((a) => a.n))].sort((a, b) => a - b) : [];
    const notes = [
      agg ? `${st.band === 't95' ? 'mean ± 95% t interval' : 'mean ± SE'} over ` +
        `${seeds.length > 1 ? `${seeds[0]}–${seeds[seeds.length - 1]}` : seeds[0] ?? 0} seeds per arm` +
        ' (drawn where every seed of the arm has data)' : 'one line per trial',
      st.ema > 0 ? `EMA ${st.ema} per trial${agg ? ' before averaging' : ''}` : null,
      clip ? `y clipped to [${fmtNum(clip.lo)}, ${fmtNum(clip.hi)}] (${ROBUST_TEXT}; ` +
        `${clip.outside} point${clip.outside === 1 ? '' : 's'} outside)` : null,
      st.log ? 'log y' : null,
    ].filter(Boolean).join(' · ');
    chart?.then((c) => c.destroy());
    chart = lineChart(chartBox, {title: `${last.metric} by ${st.color}`, series: lines,
      xLabel: X_MODES[last.x].axis, yLabel: last.metric, height: 320, logY: st.log,
      yRange: clip ? [clip.lo, clip.hi] : null, notes, noteId: 'curves-desc'});
    replace(legendBox, legend(values.filter((v) => counts.has(v)).map((v) => ({
      label: `${st.color} = ${v}`, color: colorFor(colorIdx.get(v)), count: counts.get(v)}))));
    const capped = total > trials.length;
    replace(note, agg ? `${agg.length} arms of ${have.length} curves` : `${lines.length} curves`,
        capped ? ` — capped at ${trials.length} of ${total.toLocaleString()} matching trials (${PICKS[st.pick].label}); filter or raise the cap to see others` :
          ` of ${total} matching trials`,
        missingX ? `; ${missingX} trial${missingX === 1 ? '' : 's'} without a ${X_MODES[last.x].metric} series left out` : '',
        agg ? '; an arm = the trials sharing every axis value but seed (dash pattern = arm within its colour)' :
          seedIdx.size > 1 ? '; seeds share their colour (dash pattern = seed)' : '',
        `; each curve downsampled server-side to ≤ ${POINTS} points keeping minima and maxima.`);
  };

  renderControls();
  load();
  return {
    refresh: load,
    renderControls,
    destroy() {
      chart?.then((c) => c.destroy());
    },
  };
}
