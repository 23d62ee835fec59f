// Overlaid curves of one metric for the trials matching the filters, one colour per value of the
// chosen axis; the seeds of a value share its colour (each seed its own dash pattern). At most
// `cap` trials are fetched (one downsampled series each), and the view says so.
import {api} from '../api.js';
import {h, replace, axisCompare, mapLimit, errorBox} from '../util.js';
import {lineChart, legend, colorFor, dashFor} from '../charts.js';

const CAPS = [8, 16, 32, 64, 100];
const PICKS = {
  first: {label: 'first by id', sort: 'id', order: 'asc'},
  best: {label: 'best val_loss', sort: 'val_loss', order: 'asc'},
  recent: {label: 'most recently started', sort: 'started_at', order: 'desc'},
};
const POINTS = 300;

export function curvesView(container, ctx) {
  const {sweep} = ctx;
  const controls = h('div', {class: 'controls'});
  const chartBox = h('div', {id: 'curves-chart'});
  const legendBox = h('div', {});
  const note = h('p', {class: 'muted small', id: 'curves-note', 'aria-live': 'polite'});
  replace(container, h('h2', {}, 'Curves'), controls, chartBox, legendBox, note);
  let chart = null;

  const nonSeedAxes = sweep.axes.filter((a) => a !== 'seed');
  const state = () => {
    const s = ctx.getState();
    return {
      metric: s.cmetric || 'loss',
      color: sweep.axes.includes(s.color) ? s.color : (nonSeedAxes[0] || sweep.axes[0] || ''),
      cap: CAPS.includes(Number(s.cap)) ? Number(s.cap) : 32,
      pick: PICKS[s.pick] ? s.pick : 'first',
      log: s.log === '1',
    };
  };

  const renderControls = () => {
    const st = state();
    const onChange = (key) => (e) => {
      ctx.setState({[key]: e.target.type === 'checkbox' ? (e.target.checked ? '1' : null) : e.target.value});
      load();
    };
    replace(controls,
        h('label', {for: 'curves-metric'}, 'metric '),
        ctx.metricSelect('curves-metric', st.metric, (v) => {
          ctx.setState({cmetric: v});
          load();
        }, {series: true}),
        h('label', {for: 'curves-color'}, 'colour by '),
        h('select', {id: 'curves-color', onchange: onChange('color')},
            sweep.axes.map((a) => h('option', {value: a, selected: a === st.color}, a))),
        h('label', {for: 'curves-pick'}, 'trials '),
        h('select', {id: 'curves-pick', onchange: onChange('pick')},
            Object.entries(PICKS).map(([k, p]) => h('option', {value: k, selected: k === st.pick}, p.label))),
        h('label', {for: 'curves-cap'}, 'at most '),
        h('select', {id: 'curves-cap', onchange: onChange('cap')},
            CAPS.map((c) => h('option', {value: c, selected: c === st.cap}, String(c)))),
        h('label', {class: 'check'}, h('input', {type: 'checkbox', id: 'curves-log', checked: st.log,
          onchange: onChange('log')}), 'log y'));
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
      const trials = page.trials;
      const series = await mapLimit(trials, 4, (t) =>
        api(`trials/${t.id}/series`, {name: st.metric, points: POINTS}).catch(() => null));
      if (my !== seq) return;
      draw(st, trials, series, page.total);
    } catch (e) {
      if (my === seq) replace(chartBox, errorBox(e));
    }
  };

  const draw = (st, trials, series, total) => {
    const values = [...new Set(trials.map((t) => t.axes?.[st.color] ?? '-'))].sort(axisCompare);
    const colorIdx = new Map(values.map((v, i) => [v, i]));
    const seedIdx = new Map();
    const lines = [];
    const counts = new Map();
    trials.forEach((t, i) => {
      const s = series[i];
      if (!s || s.steps.length === 0) return;
      const v = t.axes?.[st.color] ?? '-';
      const seed = t.axes?.seed ?? '';
      if (!seedIdx.has(seed)) seedIdx.set(seed, seedIdx.size);
      counts.set(v, (counts.get(v) || 0) + 1);
      const others = Object.entries(t.axes || {}).filter(([k]) => k !== st.color)
          .map(([k, x]) => `${k}=${x}`).join(' ');
      lines.push({label: `#${t.id} ${st.color}=${v} ${others}`, color: colorFor(colorIdx.get(v)),
        dash: dashFor(seedIdx.get(seed)), steps: s.steps, values: s.values});
    });
    chart?.then((c) => c.destroy());
    chart = lineChart(chartBox, {title: `${st.metric} by ${st.color}`, series: lines,
      yLabel: st.metric, height: 320, logY: st.log});
    replace(legendBox, legend(values.filter((v) => counts.has(v)).map((v) => ({
      label: `${st.color} = ${v}`, color: colorFor(colorIdx.get(v)), count: counts.get(v)}))));
    const capped = total > trials.length;
    replace(note, `${lines.length} curves`,
        capped ? ` — capped at ${trials.length} of ${total.toLocaleString()} matching trials (${PICKS[st.pick].label}); filter or raise the cap to see others` :
          ` of ${total} matching trials`,
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
