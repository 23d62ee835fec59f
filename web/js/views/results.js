// The ablation table of a sweep (GET /api/sweeps/{id}/results): the chosen metric's mean ± sample
// std over seeds for every combination of the chosen axes, the best cell highlighted. The numbers
// are those of `ablate results SWEEP --metric M --by A,B` (same server query, same formatting).
// Every cell carries data-keys / data-mean / data-std / data-n / data-trials with the raw values.
import {api} from '../api.js';
import {h, replace, axisCompare, decimalsFor, lowerIsBetter, errorBox} from '../util.js';

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
    const lower = lowerIsBetter(metric);
    let best = -1;
    rows.forEach((r, i) => {
      if (r.n > 0 && Number.isFinite(r.mean) &&
          (best < 0 || (lower ? r.mean < rows[best].mean : r.mean > rows[best].mean))) best = i;
    });
    const cell = (r, i, tag = 'td') => {
      const attrs = {class: `num result${i === best ? ' best' : ''}`, dataset: {
        keys: JSON.stringify(r.keys), mean: r.mean ?? '', std: r.std ?? '', n: r.n,
        trials: r.trials, min: r.min ?? '', max: r.max ?? ''}};
      if (i === best) attrs['aria-label'] = `${meanStd(r)} (best)`;
      return h(tag, attrs, r.n > 0 && Number.isFinite(r.mean) ?
          [h('span', {class: 'mean'}, meanStd(r)), h('span', {class: 'n'}, ` (${nText(r)})`)] :
          h('span', {class: 'muted'}, `- (0/${r.trials})`));
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
              rowAxes.length === 0 ? h('th', {scope: 'row'}, 'mean ± std (n)') : null,
              colVals.map((v) => (cols.has(v) ? cell(...cols.get(v)) : h('td', {}, ''))))))));
    } else {
      replace(table, h('table', {class: 'data results list', 'aria-describedby': 'results-title'},
          h('thead', {}, h('tr', {}, by.map((a) => h('th', {scope: 'col'}, a)),
              h('th', {scope: 'col', class: 'num'}, `${metric} mean ± std (n)`),
              h('th', {scope: 'col', class: 'num'}, 'min'), h('th', {scope: 'col', class: 'num'}, 'max'))),
          h('tbody', {}, rows.map((r, i) => h('tr', {class: i === best ? 'best-row' : null},
              r.keys.map((v) => h('th', {scope: 'row'}, v)), cell(r, i),
              h('td', {class: 'num'}, fmt(r.min, r.mean)), h('td', {class: 'num'}, fmt(r.max, r.mean)))))));
    }
    replace(note, best >= 0 ? `Highlighted: best (${lower ? 'lowest' : 'highest'} mean). ` : '',
        'std is the sample standard deviation over seeds; (n/m): n of the m trials have the metric. ',
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

function meanStd(r) {
  const d = decimalsFor(r.mean);
  return `${r.mean.toFixed(d)} ± ${r.std === null || !Number.isFinite(r.std) ? '-' : r.std.toFixed(d)}`;
}

function nText(r) {
  return r.trials > r.n ? `${r.n}/${r.trials}` : `${r.n}`;
}
