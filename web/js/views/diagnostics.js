// Attention diagnostics of SageBwd trials: the trainer compares SageBwd with exact attention on the
// live batch every diagnostics_every steps and reports, per layer l, attn.l.<tensor>.<cos|rel_l2>
// (tensor o, dq, dk, dv, p, ds) and attn.l.max_logit. Shown: the error of one tensor per layer over
// steps, the max logit per layer over steps, and the latest value of every tensor per layer.
import {api} from '../api.js';
import {h, replace, fmtNum, mapLimit, errorBox, stateBadge} from '../util.js';
import {lineChart, legend, colorFor} from '../charts.js';

const TENSOR_ORDER = ['o', 'dq', 'dk', 'dv', 'p', 'ds'];
const POINTS = 200;

// Layers and tensors present in a trial's latest metrics.
export function diagnosticsLayout(latest) {
  const layers = new Set();
  const tensors = new Set();
  for (const name of Object.keys(latest || {})) {
    let m = name.match(/^attn\.(\d+)\.([a-z0-9_]+)\.(cos|rel_l2)$/);
    if (m) {
      layers.add(Number(m[1]));
      tensors.add(m[2]);
      continue;
    }
    m = name.match(/^attn\.(\d+)\.max_logit$/);
    if (m) layers.add(Number(m[1]));
  }
  const order = (t) => (TENSOR_ORDER.indexOf(t) + 1) || 99;
  return {layers: [...layers].sort((a, b) => a - b),
    tensors: [...tensors].sort((a, b) => order(a) - order(b) || (a < b ? -1 : 1))};
}

// Charts and the per-layer table of one trial into `container`. Returns {destroy()}.
export function trialDiagnostics(container, trial, {tensor, measure, onChange}) {
  const {layers, tensors} = diagnosticsLayout(trial.latest_metrics);
  const charts = [];
  if (layers.length === 0) {
    replace(container, h('p', {class: 'muted'}, 'no attention diagnostics reported (yet) by this trial ',
        '(train.diagnostics_every)'));
    return {destroy() {}};
  }
  tensor = tensors.includes(tensor) ? tensor : (tensors[0] || 'o');
  measure = measure === 'cos' ? 'cos' : 'rel_l2';
  const errBox = h('div', {class: 'chart-cell'});
  const logitBox = h('div', {class: 'chart-cell'});
  const latest = trial.latest_metrics;
  const table = h('table', {class: 'data diag'},
      h('caption', {}, `latest ${measure} per layer and tensor (step ${
        latest[`attn.${layers[0]}.${tensor}.${measure}`]?.step ?? '-'})`),
      h('thead', {}, h('tr', {}, h('th', {scope: 'col'}, 'layer'),
          tensors.map((t) => h('th', {scope: 'col', class: 'num'}, t)),
          h('th', {scope: 'col', class: 'num'}, 'max_logit'))),
      h('tbody', {}, layers.map((l) => h('tr', {}, h('th', {scope: 'row'}, String(l)),
          // cos sits near 1: six decimals show how near.
          tensors.map((t) => h('td', {class: 'num'},
              fmtNum(latest[`attn.${l}.${t}.${measure}`]?.value, measure === 'cos' ? 6 : undefined))),
          h('td', {class: 'num'}, fmtNum(latest[`attn.${l}.max_logit`]?.value))))));
  const sel = (id, value, options, key) => h('select', {id, onchange: (e) => onChange({[key]: e.target.value})},
      options.map((o) => h('option', {value: o, selected: o === value}, o)));
  replace(container,
      h('div', {class: 'controls'},
          h('label', {for: 'diag-tensor'}, 'tensor '), sel('diag-tensor', tensor, tensors, 'dtensor'),
          h('label', {for: 'diag-measure'}, 'measure '), sel('diag-measure', measure, ['rel_l2', 'cos'], 'dmeasure')),
      h('div', {class: 'chart-grid two'}, errBox, logitBox),
      legend(layers.map((l, i) => ({label: `layer ${l}`, color: colorFor(i)}))),
      h('div', {class: 'table-scroll'}, table));
  (async () => {
    const names = [...layers.map((l) => `attn.${l}.${tensor}.${measure}`),
      ...layers.map((l) => `attn.${l}.max_logit`)];
    const series = await mapLimit(names, 4, (name) =>
      api(`trials/${trial.id}/series`, {name, points: POINTS}).catch(() => null));
    const mk = (from) => layers.map((l, i) => ({label: `layer ${l}`, color: colorFor(i),
      steps: series[from + i]?.steps || [], values: series[from + i]?.values || []}));
    charts.push(lineChart(errBox, {title: `${tensor} ${measure === 'cos' ? 'cosine similarity' :
      'relative L2 error'} vs exact attention`, series: mk(0), yLabel: measure, height: 240}));
    charts.push(lineChart(logitBox, {title: 'max attention logit', series: mk(layers.length),
      yLabel: 'max_logit', height: 240}));
  })().catch((e) => container.append(errorBox(e)));
  return {destroy() {
    charts.forEach((c) => c.then((x) => x.destroy()));
  }};
}

// The sweep page's diagnostics section: pick one SageBwd trial (matching the filters), show it.
export function diagnosticsView(container, ctx) {
  const {sweep} = ctx;
  const picker = h('div', {class: 'controls'});
  const body = h('div', {id: 'diagnostics'});
  const note = h('p', {class: 'muted small'});
  replace(container, h('h2', {}, 'Attention diagnostics (SageBwd)'), picker, note, body);
  let current = null;
  let seq = 0;

  const load = async () => {
    const my = ++seq;
    const s = ctx.getState();
    try {
      // Which trials run SageBwd: an attention.kind axis says it per trial, otherwise the base
      // config (any trial's) does for all.
      const params = {limit: 100, sort: 'id', state: 'running,succeeded,failed,diverged,canceled',
        ...ctx.filterParams()};
      let kindNote = '';
      if (sweep.axes.includes('attention.kind')) {
        if (params['axis.attention.kind'] && params['axis.attention.kind'] !== 'sagebwd') {
          kindNote = 'The filters exclude SageBwd trials.';
        }
        params['axis.attention.kind'] = 'sagebwd';
      }
      const page = kindNote ? {trials: [], total: 0} : await api(`sweeps/${sweep.id}/trials`, params);
      if (my !== seq) return;
      let trials = page.trials;
      if (!sweep.axes.includes('attention.kind') && trials.length) {
        const sample = await api(`trials/${trials[0].id}`);
        if (sample.config?.attention?.kind !== 'sagebwd') {
          kindNote = `This sweep's trials use ${sample.config?.attention?.kind ?? '?'} attention; ` +
            'the diagnostics below are what SageBwd would have computed on their batches.';
        }
      }
      if (trials.length === 0) {
        replace(picker);
        replace(note, kindNote || 'No SageBwd trial matches the filters (queued trials have no diagnostics yet).');
        replace(body);
        return;
      }
      const chosen = trials.find((t) => String(t.id) === s.dtrial) ||
          trials.find((t) => t.state === 'running') || trials[0];
      replace(picker, h('label', {for: 'diag-trial'}, 'trial '),
          h('select', {id: 'diag-trial', onchange: (e) => {
            ctx.setState({dtrial: e.target.value});
            load();
          }}, trials.map((t) => h('option', {value: t.id, selected: t === chosen},
              `#${t.id} ${Object.entries(t.axes || {}).map(([k, v]) => `${k}=${v}`).join(' ')} (${t.state})`))),
          ' ', stateBadge(chosen.state), ' ', h('a', {href: `#/trials/${chosen.id}`}, 'open trial'));
      replace(note, kindNote, page.total > trials.length ? ` First ${trials.length} of ${page.total} SageBwd trials listed.` : '');
      const trial = await api(`trials/${chosen.id}`);
      if (my !== seq) return;
      current?.destroy();
      current = trialDiagnostics(body, trial, {tensor: s.dtensor, measure: s.dmeasure,
        onChange: (c) => {
          ctx.setState(c);
          load();
        }});
    } catch (e) {
      if (my === seq) replace(body, errorBox(e));
    }
  };
  load();
  return {
    refresh: load,
    destroy() {
      current?.destroy();
    },
  };
}
