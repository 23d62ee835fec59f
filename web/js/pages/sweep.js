// #/sweeps/{id}: header (counts, progress, a notice when no connected worker can take the queued
// trials, spec), the ablation table, the paired comparison, filters shared by the curves,
// the trial table and the diagnostics. Live: events of this sweep refetch (debounced) what they
// change; while trials run, the table refreshes every 5 s and the charts every 15 s (a step's
// metrics produce no event).
import {api} from '../api.js';
import {getState, setState} from '../route.js';
import {axisCompare, debounce, errorBox, fmtTime, h, progressBar, replace, stateCounts, STATES, waitingNotice} from '../util.js';
import {curvesView} from '../views/curves.js';
import {diagnosticsView} from '../views/diagnostics.js';
import {pairedView} from '../views/paired.js';
import {resultsView} from '../views/results.js';
import {decisionsView} from '../views/decisions.js';
import {trialsView} from '../views/trials.js';

// Metrics reported once (the trainer's start and final lines, the worker's overhead): not curves.
const ONCE = new Set(['params', 'vocab_size', 'train_tokens', 'val_tokens', 'unigram_entropy',
  'accumulation_steps', 'tokens_per_step', 'flops_per_token', 'peak_flops', 'optimizer_state_bytes',
  'optimizer_state_bytes_fp32', 'optimizer_state_saved', 'spectral_tensors', 'threads',
  'resumed_from_step', 'final_train_loss', 'final_val_loss', 'best_val_loss', 'elapsed_s',
  'startup_s', 'teardown_s']);  // the last two: the worker's, once per attempt
const PREFERRED = ['final_val_loss', 'best_val_loss', 'final_train_loss', 'val_loss', 'loss',
  'val_bpb', 'tokens_per_s', 'mfu', 'grad_norm', 'lr'];

export function isSeriesMetric(name) {
  return !ONCE.has(name);
}

export function sortMetrics(names) {
  const rank = (n) => {
    const i = PREFERRED.indexOf(n);
    return i >= 0 ? i : n.startsWith('attn.') ? 1000 : 100;
  };
  return [...names].sort((a, b) => rank(a) - rank(b) || (a < b ? -1 : a > b ? 1 : 0));
}

export function sweepPage(main, [ref]) {
  const header = h('div', {class: 'sweep-head'}, h('p', {class: 'muted'}, 'loading…'));
  const filters = h('section', {class: 'filters', 'aria-label': 'trial filters'});
  const sections = {
    results: h('section', {class: 'card', id: 'results-section'}),
    paired: h('section', {class: 'card', id: 'paired-section'}),
    curves: h('section', {class: 'card', id: 'curves-section'}),
    trials: h('section', {class: 'card', id: 'trials-section'}),
    diagnostics: h('section', {class: 'card', id: 'diagnostics-section'}),
    decisions: h('section', {class: 'card', id: 'decisions-section'}),
  };
  replace(main, header);
  let sweep = null;
  let metricNames = [];
  let axisValues = new Map();
  let views = {};
  let timer = null;
  let tick = 0;

  const ctx = {
    get sweep() {
      return sweep;
    },
    getState,
    setState,
    defaultBy: () => sweep.axes.filter((a) => a !== 'seed'),
    filterParams() {
      const s = getState();
      const p = {};
      if (s.st) p.state = s.st;
      for (const [k, v] of Object.entries(s)) {
        if (k.startsWith('f.') && sweep.axes.includes(k.slice(2))) p[`axis.${k.slice(2)}`] = v;
      }
      return p;
    },
    // A <select> of the sweep's metric names (curves: only those reported over steps).
    metricSelect(id, value, onChange, {series = false} = {}) {
      let names = metricNames.filter((n) => !series || isSeriesMetric(n));
      if (names.length === 0) names = series ? ['loss', 'val_loss'] : ['final_val_loss', 'val_loss', 'loss'];
      if (!names.includes(value)) names = [value, ...names];
      const main = names.filter((n) => !n.startsWith('attn.'));
      const attn = names.filter((n) => n.startsWith('attn.'));
      const opt = (n) => h('option', {value: n, selected: n === value}, n);
      return h('select', {id, onchange: (e) => onChange(e.target.value)}, main.map(opt),
          attn.length ? h('optgroup', {label: 'attention diagnostics'}, attn.map(opt)) : null);
    },
  };

  const renderHeader = () => {
    const specOpen = header.querySelector('details')?.open;  // keep what the reader opened
    const finished = (sweep.counts.queued ?? 0) + (sweep.counts.running ?? 0) === 0;
    replace(
        header,
        h('nav', {class: 'crumbs', 'aria-label': 'breadcrumb'}, h('a', {href: '#/'}, 'Sweeps'),
          ' / ', sweep.name),
        h('div', {class: 'title-row'},
          h('h1', {}, sweep.name, h('span', {class: 'muted id'}, ` #${sweep.id}`)),
          sweep.archived ? h('span', {class: 'badge archived', id: 'sweep-archived'}, 'archived') : null,
          h('span', {class: finished ? 'muted' : 'active', id: 'sweep-status'},
            finished ? 'finished' : 'active')),
        h('div', {class: 'meta'}, h('span', {}, `${sweep.total} trials`),
          h('span', {}, `axes: ${sweep.axes.join(' × ') || '-'}`),
          h('span', {},
            sweep.gpus ? `${sweep.gpus} GPU(s) per trial` :
                         `${sweep.cpu_slots || 1} CPU slot(s) per trial`),
          h('span', {}, `max attempts ${sweep.max_attempts}`),
          h('span', {}, `priority ${sweep.priority}`),
          h('span', {}, `created ${fmtTime(sweep.created_at)}`)),
        h('div', {class: 'sweep-progress', id: 'sweep-counts'},
          stateCounts(sweep.counts, {all: true}), progressBar(sweep.counts, sweep.total)),
        waitingNotice(sweep, {id: 'sweep-waiting'}),
        sweep.spec_yaml ? h('details', {open: specOpen}, h('summary', {}, 'sweep spec'),
                            h('pre', {class: 'code'}, sweep.spec_yaml)) :
                          null);
  };

  const renderFilters = () => {
    const s = getState();
    const chosen = new Set((s.st || '').split(',').filter(Boolean));
    const toggle = (state) => () => {
      chosen.has(state) ? chosen.delete(state) : chosen.add(state);
      setState({st: [...chosen].join(','), offset: null});
      renderFilters();
      refreshFiltered();
    };
    const any = chosen.size === 0 && !Object.keys(s).some((k) => k.startsWith('f.'));
    replace(filters,
        h('span', {class: 'label'}, 'Filter trials:'),
        h('span', {class: 'state-filter', role: 'group', 'aria-label': 'by state'}, STATES.map((st) =>
          h('button', {type: 'button', class: `chip toggle state-${st}`, id: `filter-${st}`,
            'aria-pressed': chosen.has(st) ? 'true' : 'false', onclick: toggle(st)},
          h('b', {}, String(sweep.counts[st] ?? 0)), ` ${st}`))),
        sweep.axes.map((a) => {
          const id = `filter-axis-${a.replace(/[^a-zA-Z0-9_-]/g, '_')}`;
          const vals = axisValues.get(a) || [];
          const cur = s[`f.${a}`] || '';
          return h('span', {class: 'axis-filter'}, h('label', {for: id}, `${a} `),
              h('select', {id, dataset: {axis: a}, onchange: (e) => {
                setState({[`f.${a}`]: e.target.value, offset: null});
                renderFilters();
                refreshFiltered();
              }}, h('option', {value: ''}, 'any'),
              (cur && !vals.some((v) => v.value === cur)) ? h('option', {value: cur, selected: true}, cur) : null,
              vals.map((v) => h('option', {value: v.value, selected: v.value === cur}, `${v.value} (${v.trials})`))));
        }),
        any ? null : h('button', {type: 'button', class: 'link', onclick: () => {
          const clear = {st: null, offset: null};
          for (const k of Object.keys(getState())) if (k.startsWith('f.')) clear[k] = null;
          setState(clear);
          renderFilters();
          refreshFiltered();
        }}, 'clear filters'));
  };

  // Between user changes only the counts move: update them in place (a re-render would close an
  // open <select> and drop the focus).
  const updateFilterCounts = () => {
    if (!filters.hasChildNodes()) return renderFilters();
    for (const st of STATES) {
      const b = filters.querySelector(`#filter-${st} b`);
      if (b) b.textContent = String(sweep.counts[st] ?? 0);
    }
  };

  const refreshFiltered = () => {
    views.trials?.refresh();
    views.curves?.refresh();
    views.diagnostics?.refresh();
  };

  // Axis values and their trial counts: one grouped query per axis (the results route groups every
  // trial, with or without the metric).
  const loadAxisValues = async () => {
    const entries = await Promise.all(sweep.axes.map(async (a) => {
      const r = await api(`sweeps/${sweep.id}/results`, {metric: 'final_val_loss', by: a});
      return [a, r.rows.map((row) => ({value: row.keys[0], trials: row.trials}))
          .sort((x, y) => axisCompare(x.value, y.value))];
    }));
    axisValues = new Map(entries);
  };

  // Metric names from the latest metrics of one trial that has reported something.
  const loadMetricNames = async () => {
    for (const params of [{state: 'succeeded', limit: 1}, {sort: 'step', order: 'desc', limit: 1}]) {
      const page = await api(`sweeps/${sweep.id}/trials`, params);
      const t = page.trials[0];
      if (!t || (t.step === 0 && t.state !== 'succeeded')) continue;
      const detail = await api(`trials/${t.id}`);
      const names = Object.keys(detail.latest_metrics || {});
      if (names.length) return sortMetrics(names);
    }
    return [];
  };

  const reloadSweep = async () => {
    sweep = await api(`sweeps/${encodeURIComponent(ref)}`);
    renderHeader();
    updateFilterCounts();
  };

  const refreshAll = debounce(async () => {
    try {
      await reloadSweep();
      if (metricNames.length === 0) {
        metricNames = await loadMetricNames();
        if (metricNames.length) {
          views.results?.renderControls();
          views.paired?.renderControls();
          views.curves?.renderControls();
        }
      }
    } catch (e) {
      // The next event or tick retries; the sections show their own errors.
    }
    views.trials?.refresh();
    views.results?.refresh();
    views.paired?.refresh();
    views.decisions?.refresh();
  }, 1000);
  const refreshCharts = debounce(() => {
    views.curves?.refresh();
    views.diagnostics?.refresh();
  }, 4000);

  (async () => {
    try {
      await reloadSweep();
    } catch (e) {
      replace(header, h('nav', {class: 'crumbs'}, h('a', {href: '#/'}, 'Sweeps')), errorBox(e));
      return;
    }
    main.append(sections.results, sections.paired, filters, sections.curves, sections.trials, sections.diagnostics);
    if (sweep.early_stop) main.insertBefore(sections.decisions, filters);
    views = {
      results: resultsView(sections.results, ctx),
      paired: pairedView(sections.paired, ctx),
      curves: curvesView(sections.curves, ctx),
      trials: trialsView(sections.trials, ctx),
      diagnostics: diagnosticsView(sections.diagnostics, ctx),
      ...(sweep.early_stop ? {decisions: decisionsView(sections.decisions, ctx)} : {}),
    };
    // Filter values and metric names fill their selects when they arrive (the views do not wait).
    loadAxisValues().then(renderFilters).catch(() => {});
    loadMetricNames().then((names) => {
      metricNames = names;
      views.results.renderControls();
      views.paired.renderControls();
      views.curves.renderControls();
    }).catch(() => {});
    timer = setInterval(() => {
      if (!sweep || (sweep.counts.running ?? 0) === 0) return;
      tick++;
      views.trials.refresh();
      if (tick % 3 === 0) refreshCharts();
    }, 5000);
  })();

  return {
    onEvent(type, data) {
      if (!sweep) return;
      if (type === 'changed') {
        const c = (data.sweeps || []).find((x) => x.id === sweep.id);
        if (!c) return;
        const changed = STATES.some((s) => (c.counts?.[s] ?? 0) !== (sweep.counts[s] ?? 0));
        if (changed) {
          for (const s of STATES) sweep.counts[s] = c.counts?.[s] ?? 0;
          sweep.total = c.total;
          renderHeader();
          updateFilterCounts();
          refreshAll();
          refreshCharts();
        }
      } else if (type === 'worker') {
        // A worker came or went: whether the queued trials can run (waiting_reason) may change.
        refreshAll();
      } else if (data.sweep_id === sweep.id) {
        if (type === 'sweep') loadAxisValues().then(renderFilters).catch(() => {});
        refreshAll();
        refreshCharts();
      }
    },
    destroy() {
      clearInterval(timer);
      refreshAll.cancel();
      refreshCharts.cancel();
      Object.values(views).forEach((v) => v.destroy?.());
    },
  };
}
