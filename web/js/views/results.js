// The ablation table of a sweep (GET /api/sweeps/{id}/results): the chosen metric's mean ± its
// standard error over seeds and the 95% interval for every combination of the chosen axes; the best
// cell highlighted only when the server marked it (its interval apart from every other cell's),
// cells with diverged seeds flagged, mixed builds said. The numbers are those of `ablate results
// SWEEP --metric M --by A,B` (same server query, same formatting). Every cell carries data-keys /
// data-mean / data-std / data-se / data-ci-low / data-ci-high / data-n / data-trials /
// data-diverged / data-failed / data-builds with the raw values.
import {api} from '../api.js';
import {h, replace, axisCompare, decimalsFor, errorBox} from '../util.js';

export function resultsView(container, ctx) {
  const {sweep} = ctx;
  const controls = h('div', {class: 'controls'});
  const table = h('div', {class: 'table-scroll', id: 'results'});
  const note = h('p', {class: 'muted small'});
  replace(container, h('h2', {id: 'results-title'}, 'Ablation table'), controls, table, note);

  const state = () => {
    const s = ctx.getState();
    const metric = s.metric || 'final_val_loss';
    const by = s.by !== undefined ? s.by.split(',').filter(Boolean) : ctx.defaultBy();
    const layout = s.layout || (by.length >= 2 ? 'pivot' : 'list');
    return {metric, by, layout};
  };

  const renderControls = () => {
    const {metric, by, layout} = state();
    const metricSel = ctx.metricSelect('results-metric', metric, (v) => {
      ctx.setState({metric: v});
      refresh();
    });
    const axes = h('fieldset', {class: 'inline'}, h('legend', {}, 'by'),
        sweep.axes.map((a) => h('label', {class: 'check'},
            h('input', {type: 'checkbox', value: a, checked: by.includes(a), onchange: () => {
              const chosen = [...axes.querySelectorAll('input:checked')].map((i) => i.value);
              // ',' keeps "no axis" distinct from "no choice yet" (the default axes).
              ctx.setState({by: chosen.length ? chosen.join(',') : ',', layout: null});
              renderControls();
              refresh();
            }}), a)));
    const layoutSel = h('select', {id: 'results-layout', onchange: (e) => {
      ctx.setState({layout: e.target.value});
      refresh();
    }}, ['pivot', 'list'].map((l) => h('option', {value: l, selected: l === layout}, l)));
    replace(controls,
        h('label', {for: 'results-metric'}, 'metric '), metricSel, axes,
        h('label', {for: 'results-layout'}, 'layout '), layoutSel);
  };

  const load = async () => {
    const {metric, by, layout} = state();
    try {
      const res = await api(`sweeps/${sweep.id}/results`, {metric, by: by.join(',')});
      render(res, layout);
    } catch (e) {
      replace(table, errorBox(e));
    }
  };

  const render = (res, layout) => {
    const {metric, by, rows} = res;
    const lower = res.lower_is_better;
    const best = rows.findIndex((r) => r.best === true);
    const cell = (r, i, tag = 'td') => {
      const flags = [i === best ? 'best' : null, r.diverged > 0 ? 'diverged' : null,
        r.builds > 1 ? 'mixed-builds' : null].filter(Boolean);
      const attrs = {class: ['num', 'result', ...flags].join(' '), dataset: {
        keys: JSON.stringify(r.keys), mean: r.mean ?? '', std: r.std ?? '', se: r.se ?? '',
        ciLow: r.ci_low ?? '', ciHigh: r.ci_high ?? '', n: r.n, trials: r.trials,
        min: r.min ?? '', max: r.max ?? '', diverged: r.diverged ?? 0, failed: r.failed ?? 0,
        builds: r.builds ?? 0}};
      if (i === best) attrs['aria-label'] = `${meanSe(r)} (best)`;
      const extra = [
        r.diverged > 0 ? h('span', {class: 'flag diverged', title: 'seeds that diverged (not in the mean)'}, ` ! ${r.diverged} diverged`) : null,
        r.failed > 0 ? h('span', {class: 'flag failed', title: 'seeds that failed (not in the mean)'}, ` ${r.failed} failed`) : null,
        r.builds > 1 ? h('span', {class: 'flag mixed', title: 'values from different builds of the trainer'}, ` ${r.builds} builds`) : null,
      ];
      return h(tag, attrs, r.n > 0 && Number.isFinite(r.mean) ?
          [h('span', {class: 'mean'}, meanSe(r)), h('span', {class: 'n'}, ` (${nText(r)})`),
            h('span', {class: 'ci muted small'}, ` ${ciText(r)}`), ...extra] :
          [h('span', {class: 'muted'}, `- (0/${r.trials})`), ...extra]);
    };
    if (rows.length === 0) {
      replace(table, h('p', {class: 'muted'}, `no trials`));
    } else if (layout === 'pivot' && by.length >= 1) {
      // Rows: every axis but the last; columns: the last axis's values.
      const colAxis = by[by.length - 1];
      const rowAxes = by.slice(0, -1);
      const colVals = [...new Set(rows.map((r) => r.keys[by.length - 1]))].sort(axisCompare);
      const rowKeys = new Map();
      rows.forEach((r, i) => {
        const k = JSON.stringify(r.keys.slice(0, -1));
        if (!rowKeys.has(k)) rowKeys.set(k, new Map());
        rowKeys.get(k).set(r.keys[by.length - 1], [r, i]);
      });
      replace(table, h('table', {class: 'data results pivot', 'aria-describedby': 'results-title'},
          h('thead', {}, h('tr', {},
              rowAxes.map((a) => h('th', {scope: 'col'}, a)),
              rowAxes.length === 0 ? h('th', {scope: 'col'}, metric) : null,
              colVals.map((v) => h('th', {scope: 'col', class: 'num'}, `${colAxis} = ${v}`)))),
          h('tbody', {}, [...rowKeys].map(([k, cols]) => h('tr', {},
              JSON.parse(k).map((v) => h('th', {scope: 'row'}, v)),
              rowAxes.length === 0 ? h('th', {scope: 'row'}, 'mean ± se (n) [95% CI]') : null,
              colVals.map((v) => (cols.has(v) ? cell(...cols.get(v)) : h('td', {}, ''))))))));
    } else {
      replace(table, h('table', {class: 'data results list', 'aria-describedby': 'results-title'},
          h('thead', {}, h('tr', {}, by.map((a) => h('th', {scope: 'col'}, a)),
              h('th', {scope: 'col', class: 'num'}, `${metric} mean ± se (n) [95% CI]`),
              h('th', {scope: 'col', class: 'num'}, 'min'), h('th', {scope: 'col', class: 'num'}, 'max'))),
          h('tbody', {}, rows.map((r, i) => h('tr', {class: i === best ? 'best-row' : null},
              r.keys.map((v) => h('th', {scope: 'row'}, v)), cell(r, i),
              h('td', {class: 'num'}, fmt(r.min, r.mean)), h('td', {class: 'num'}, fmt(r.max, r.mean)))))));
    }
    const any = rows.some((r) => r.n > 0);
    replace(note,
        best >= 0 ? `Highlighted: best (${lower ? 'lowest' : 'highest'} mean, its 95% interval apart from every other cell's). ` :
          any ? 'No best highlighted: no cell\'s 95% interval is apart from all others (compare tests paired differences). ' : '',
        'se: standard error of the mean over seeds; [95% CI]: t interval of the mean; (n/m): n of the m trials have a value; ',
        'diverged and failed seeds are counted, not averaged. ',
        'Same as ', h('code', {}, `ablate results ${sweep.name} --metric ${metric}` +
            (by.length ? ` --by ${by.join(',')}` : '')), '.');
  };

  renderControls();
  const refresh = () => load();
  refresh();
  return {refresh, renderControls};
}

function fmt(v, mean) {
  return v === null || v === undefined || !Number.isFinite(v) ? '-' : v.toFixed(decimalsFor(mean ?? v));
}

function meanSe(r) {
  const d = decimalsFor(r.mean);
  return `${r.mean.toFixed(d)} ± ${r.se === null || !Number.isFinite(r.se) ? '-' : r.se.toFixed(d)}`;
}

function ciText(r) {
  const d = decimalsFor(r.mean);
  return Number.isFinite(r.ci_low) ? `[${r.ci_low.toFixed(d)}, ${r.ci_high.toFixed(d)}]` : '[-]';
}

function nText(r) {
  return r.trials > r.n ? `${r.n}/${r.trials}` : `${r.n}`;
}
