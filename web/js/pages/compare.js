// #/compare?trials=1,2,3: two or more trials side by side: what they are (sweep, state, axes, tags),
// the config keys whose values differ (dotted keys of each trial's resolved config; the identical
// ones folded away), and their curves of one metric together (x by step, tokens or wall time,
// optional EMA, log y, robust y-range as on the sweep page).
import {api} from '../api.js';
import {getState, setState} from '../route.js';
import {h, replace, stateBadge, fmtNum, errorBox, mapLimit, flattenConfig, tagList} from '../util.js';
import {lineChart, colorFor} from '../charts.js';
import {X_MODES, ROBUST_TEXT, fetchCurve, ema, robustRange} from '../series.js';
import {isSeriesMetric, sortMetrics} from './sweep.js';
import {parseEma} from '../views/curves.js';

const POINTS = 400;

export function comparePage(main) {
  const ids = [...new Set((getState().trials || '').split(',').map(Number)
      .filter((n) => Number.isInteger(n) && n > 0))];
  const head = h('div', {}, h('nav', {class: 'crumbs', 'aria-label': 'breadcrumb'},
      h('a', {href: '#/'}, 'Sweeps'), ' / compare'),
  h('h1', {}, `Compare trials ${ids.map((i) => `#${i}`).join(', ')}`));
  const body = h('div', {}, h('p', {class: 'muted'}, 'loading…'));
  replace(main, head, body);
  let trials = [];
  let chart = null;
  const curvesBox = h('section', {class: 'card', id: 'compare-curves'});
  if (ids.length < 2) {
    replace(body, h('p', {class: 'notice'}, 'Select two or more trials to compare: tick them in a sweep\'s ',
        'trial table and press "compare selected", or give their ids, e.g. ', h('code', {}, '#/compare?trials=1,2')));
    return {};
  }

  const renderTrials = () => h('section', {class: 'card'}, h('h2', {}, 'Trials'),
      h('div', {class: 'table-scroll'}, h('table', {class: 'data', id: 'compare-trials'},
          h('thead', {}, h('tr', {}, ['trial', 'sweep', 'state', 'axes', 'step', 'val_loss', 'tags / note']
              .map((c) => h('th', {scope: 'col'}, c)))),
          h('tbody', {}, trials.map((t, i) => h('tr', {dataset: {trial: t.id}},
              h('th', {scope: 'row'}, h('span', {class: 'swatch', style: `background:${colorFor(i)}`}), ' ',
                  h('a', {href: `#/trials/${t.id}`}, `#${t.id}`)),
              h('td', {}, h('a', {href: `#/sweeps/${t.sweep_id}`}, t.sweepName)),
              h('td', {}, stateBadge(t.state)),
              h('td', {}, Object.entries(t.axes || {}).map(([k, v]) => `${k}=${v}`).join(' ')),
              h('td', {class: 'num'}, `${t.step}/${t.total_steps || '?'}`),
              h('td', {class: 'num'}, fmtNum(t.val_loss, 4)),
              h('td', {}, tagList(t.tags), t.note ? h('span', {class: 'note'}, t.note) : null)))))));

  const renderConfig = () => {
    const flat = trials.map((t) => flattenConfig(t.config));
    const keys = [...new Set(flat.flatMap((f) => Object.keys(f)))].sort();
    const differ = keys.filter((k) => flat.some((f) => f[k] !== flat[0][k]));
    const same = keys.filter((k) => !differ.includes(k));
    const show = (v) => (v === undefined ? h('span', {class: 'muted'}, '(absent)') : v.replace(/^"(.*)"$/, '$1'));
    return h('section', {class: 'card', id: 'compare-config'},
        h('h2', {}, 'Config differences'),
        h('p', {class: 'muted small'}, `${differ.length} of ${keys.length} keys of the resolved configs differ.`),
        differ.length === 0 ? h('p', {id: 'compare-diff'}, 'The configs are identical.') :
          h('div', {class: 'table-scroll'}, h('table', {class: 'data', id: 'compare-diff'},
              h('thead', {}, h('tr', {}, h('th', {scope: 'col'}, 'key'),
                  trials.map((t) => h('th', {scope: 'col'}, `#${t.id}`)))),
              h('tbody', {}, differ.map((k) => h('tr', {dataset: {key: k}}, h('th', {scope: 'row'}, h('code', {}, k)),
                  flat.map((f) => h('td', {}, show(f[k])))))))),
        h('details', {id: 'compare-same'}, h('summary', {}, `${same.length} identical keys`),
            h('table', {class: 'data'}, h('tbody', {}, same.map((k) => h('tr', {dataset: {key: k}},
                h('th', {scope: 'row'}, h('code', {}, k)), h('td', {}, show(flat[0][k]))))))));
  };

  const state = () => {
    const s = getState();
    return {metric: s.metric || 'loss', x: X_MODES[s.x] ? s.x : 'step', ema: parseEma(s.ema),
      log: s.log === '1', yr: s.yr === 'full' ? 'full' : 'robust'};
  };

  const renderCurves = async () => {
    const st = state();
    const names = sortMetrics([...new Set(trials.flatMap((t) => Object.keys(t.latest_metrics || {})))]
        .filter((n) => isSeriesMetric(n) && !n.startsWith('attn.')));
    if (!names.includes(st.metric)) names.unshift(st.metric);
    const set = (key, v) => {
      setState({[key]: v});
      renderCurves();
    };
    const chartBox = h('div', {id: 'compare-chart'});
    replace(curvesBox, h('h2', {}, 'Curves'), h('div', {class: 'controls'},
        h('label', {for: 'compare-metric'}, 'metric '),
        h('select', {id: 'compare-metric', onchange: (e) => set('metric', e.target.value)},
            names.map((n) => h('option', {value: n, selected: n === st.metric}, n))),
        h('label', {for: 'compare-x'}, 'x '),
        h('select', {id: 'compare-x', onchange: (e) => set('x', e.target.value)},
            Object.entries(X_MODES).map(([k, m]) => h('option', {value: k, selected: k === st.x}, m.label))),
        h('label', {for: 'compare-ema'}, 'EMA '),
        h('input', {id: 'compare-ema', type: 'number', min: 0, max: 0.99, step: 0.01, value: st.ema,
          onchange: (e) => set('ema', parseEma(e.target.value) || null)}),
        h('label', {for: 'compare-yr'}, 'y range '),
        h('select', {id: 'compare-yr', onchange: (e) => set('yr', e.target.value)},
            ['robust', 'full'].map((v) => h('option', {value: v, selected: v === st.yr}, v))),
        h('label', {class: 'check'}, h('input', {type: 'checkbox', id: 'compare-log', checked: st.log,
          onchange: (e) => set('log', e.target.checked ? '1' : null)}), 'log y')), chartBox);
    const curves = await mapLimit(trials, 4, (t) =>
      fetchCurve(t.id, st.metric, st.x, POINTS).catch(() => ({missing: st.metric})));
    const lines = trials.map((t, i) => ({label: `#${t.id} ${Object.entries(t.axes || {}).map(([k, v]) => `${k}=${v}`).join(' ')}`,
      color: colorFor(i), width: 2, steps: curves[i].x || [], values: curves[i].y ? ema(curves[i].y, st.ema) : []}));
    const clip = st.yr === 'robust' ? robustRange(lines.flatMap((l) => l.values), st.log) : null;
    const missing = trials.map((t, i) => (curves[i].missing ? `#${t.id} (no ${curves[i].missing})` : null))
        .filter(Boolean);
    const notes = [st.ema > 0 ? `EMA ${st.ema} per trial` : null,
      clip ? `y clipped to [${fmtNum(clip.lo)}, ${fmtNum(clip.hi)}] (${ROBUST_TEXT})` : null,
      st.log ? 'log y' : null, missing.length ? `not drawn: ${missing.join(', ')}` : null].filter(Boolean).join(' · ');
    chart?.then((c) => c.destroy());
    chart = lineChart(chartBox, {title: st.metric, series: lines, xLabel: X_MODES[st.x].axis,
      yLabel: st.metric, height: 320, logY: st.log, yRange: clip ? [clip.lo, clip.hi] : null,
      notes: notes || null});
  };

  (async () => {
    const names = new Map();
    try {
      trials = await mapLimit(ids, 4, (id) => api(`trials/${id}`));
      for (const t of trials) {
        if (!names.has(t.sweep_id)) {
          names.set(t.sweep_id, await api(`sweeps/${t.sweep_id}`).then((s) => s.name, () => `sweep #${t.sweep_id}`));
        }
        t.sweepName = names.get(t.sweep_id);
      }
    } catch (e) {
      replace(body, errorBox(e));
      return;
    }
    if (names.size === 1) {
      const [[sid, name]] = [...names];
      replace(head.querySelector('nav'), h('a', {href: '#/'}, 'Sweeps'), ' / ',
          h('a', {href: `#/sweeps/${sid}`}, name), ' / compare');
    }
    replace(body, renderTrials(), renderConfig(), curvesBox);
    renderCurves();
  })();

  return {
    destroy() {
      chart?.then((c) => c.destroy());
    },
  };
}
