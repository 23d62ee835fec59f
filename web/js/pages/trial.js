// #/trials/{id}: state and progress, tags and note, every metric's curve, the attention diagnostics,
// the resolved config, the attempts (with the build that ran each, when reported) and their log tails. Live: this trial's events refetch it; while it runs,
// it refreshes every 5 s (curves every 15 s).
import {api} from '../api.js';
import {getState, setState} from '../route.js';
import {h, replace, stateBadge, fmtNum, fmtTime, fmtDuration, debounce, errorBox, mapLimit, tagList} from '../util.js';
import {lineChart, colorFor} from '../charts.js';
import {trialDiagnostics} from '../views/diagnostics.js';
import {isSeriesMetric, sortMetrics} from './sweep.js';

const POINTS = 400;

export function trialPage(main, [id]) {
  const head = h('div', {}, h('p', {class: 'muted'}, 'loading…'));
  const curves = h('section', {class: 'card', id: 'trial-curves'});
  const diag = h('section', {class: 'card', id: 'trial-diagnostics'});
  const bottom = h('div', {});
  replace(main, head);
  let trial = null;
  let sweepName = '';
  let charts = [];
  let diagView = null;
  let timer = null;
  let tick = 0;

  const renderHead = async () => {
    const t = trial;
    if (!sweepName) {
      try {
        sweepName = (await api(`sweeps/${t.sweep_id}`)).name;
      } catch {
        sweepName = `sweep #${t.sweep_id}`;
      }
    }
    const dur = t.started_at ? (t.finished_at || Date.now() / 1000) - t.started_at : null;
    replace(head,
        h('nav', {class: 'crumbs', 'aria-label': 'breadcrumb'}, h('a', {href: '#/'}, 'Sweeps'), ' / ',
            h('a', {href: `#/sweeps/${t.sweep_id}`}, sweepName), ' / ', `trial #${t.id}`),
        h('div', {class: 'title-row'}, h('h1', {}, `Trial #${t.id}`), stateBadge(t.state)),
        h('div', {class: 'axes-line'}, Object.entries(t.axes || {}).map(([k, v]) =>
          h('span', {class: 'kv'}, h('span', {class: 'k'}, k), ' ', h('b', {}, v)))),
        t.tags?.length || t.note ? h('div', {class: 'annotations', id: 'trial-annotations'},
            tagList(t.tags), t.note ? h('p', {class: 'note', id: 'trial-note'}, t.note) : null) : null,
        h('dl', {class: 'stats', id: 'trial-stats'},
            stat('step', `${t.step} / ${t.total_steps || '?'}`),
            stat('loss', fmtNum(t.loss, 4)), stat('val_loss', fmtNum(t.val_loss, 4)),
            stat('attempt', t.attempt ? `${t.attempt} of ${t.max_attempts}` : '-'),
            stat('worker', t.worker_id || '-'), stat('started', fmtTime(t.started_at)),
            stat('duration', fmtDuration(dur)), stat('config hash', h('code', {}, t.config_hash)),
            t.checkpoint?.step ? stat('checkpoint', `step ${t.checkpoint.step}`) : null,
            t.reason ? stat('reason', t.reason) : null));
  };

  const renderCurves = async () => {
    const latest = trial.latest_metrics || {};
    const names = sortMetrics(Object.keys(latest).filter((n) => !n.startsWith('attn.')));
    const seriesNames = names.filter(isSeriesMetric);
    const scalars = names.filter((n) => !isSeriesMetric(n));
    const grid = h('div', {class: 'chart-grid'});
    replace(curves, h('h2', {}, 'Metrics'), seriesNames.length ? grid :
      h('p', {class: 'muted'}, 'no metrics reported yet'),
    scalars.length ? h('details', {open: true}, h('summary', {}, 'run summary (reported once)'),
        h('dl', {class: 'stats small'}, scalars.map((n) => stat(n, fmtNum(latest[n].value))))) : null);
    const cells = seriesNames.map((n) => {
      const c = h('div', {class: 'chart-cell', dataset: {metric: n}});
      grid.append(c);
      return c;
    });
    const data = await mapLimit(seriesNames, 4, (n) =>
      api(`trials/${trial.id}/series`, {name: n, points: POINTS}).catch(() => null));
    charts.forEach((c) => c.then((x) => x.destroy()));
    charts = seriesNames.map((n, i) => lineChart(cells[i], {title: n, yLabel: '', height: 180,
      series: [{label: n, color: colorFor(0), steps: data[i]?.steps || [], values: data[i]?.values || []}]}));
  };

  const renderDiagnostics = () => {
    const s = getState();
    diagView?.destroy();
    const body = h('div', {});
    replace(diag, h('h2', {}, 'Attention diagnostics',
        trial.config?.attention?.kind ? h('span', {class: 'muted'}, ` (attention: ${trial.config.attention.kind})`) : null), body);
    diagView = trialDiagnostics(body, trial, {tensor: s.dtensor, measure: s.dmeasure, onChange: (c) => {
      setState(c);
      renderDiagnostics();
    }});
  };

  const renderBottom = () => {
    const attempts = [...(trial.attempts || [])].reverse();
    const builds = attempts.some((a) => a.build && typeof a.build === 'object');
    // Keep the log panels the reader opened or closed across refreshes.
    const first = !bottom.hasChildNodes();
    const open = new Set([...bottom.querySelectorAll('details.log[open]')].map((d) => d.dataset.attempt));
    replace(bottom,
        h('section', {class: 'card', id: 'trial-attempts'}, h('h2', {}, 'Attempts'),
            attempts.length === 0 ? h('p', {class: 'muted'}, 'not started yet') :
              h('div', {class: 'table-scroll'}, h('table', {class: 'data'},
                  h('thead', {}, h('tr', {}, ['#', 'state', 'worker', 'GPUs / slots', 'started', 'ended',
                    'exit', 'checkpoint', 'reason', builds ? 'build' : null].filter(Boolean).map(
                      (c) => h('th', {scope: 'col'}, c)))),
                  h('tbody', {}, attempts.map((a) => h('tr', {},
                      h('th', {scope: 'row'}, String(a.attempt)), h('td', {}, stateBadge(a.state)),
                      h('td', {}, a.worker_id || '-'),
                      h('td', {}, a.gpus?.length ? `GPU ${a.gpus.join(',')}` : `${a.cpu_slots} CPU`),
                      h('td', {class: 'nowrap'}, fmtTime(a.started_at)), h('td', {class: 'nowrap'}, fmtTime(a.ended_at)),
                      h('td', {class: 'num'}, a.ended_at ? String(a.exit_code) : '-'),
                      h('td', {class: 'num'}, a.checkpoint_step ? String(a.checkpoint_step) : '-'),
                      h('td', {}, a.reason || ''),
                      builds ? h('td', {class: 'build'}, buildText(a.build)) : null))))),
            attempts.map((a, i) => h('details', {open: first ? i === 0 : open.has(String(a.attempt)),
              class: 'log', dataset: {attempt: a.attempt}},
                h('summary', {}, `log tail of attempt ${a.attempt}`),
                a.log_tail ? h('pre', {class: 'code log-tail'}, a.log_tail) : h('p', {class: 'muted'}, 'empty')))),
        trial.decisions?.length ? h('section', {class: 'card', id: 'trial-decisions'},
            h('h2', {}, 'Early stopping'),
            h('p', {class: 'muted small'}, 'the judgments of its configuration (its seeds together)'),
            h('div', {class: 'table-scroll'}, h('table', {class: 'data'},
                h('thead', {}, h('tr', {}, ['step', 'rung', 'value (seed mean)', 'threshold',
                  'compared with', 'decision'].map((c) => h('th', {scope: 'col'}, c)))),
                h('tbody', {}, trial.decisions.map((d) => h('tr', {dataset: {decision: d.decision}},
                    h('td', {class: 'num'}, String(d.step)), h('td', {class: 'num'}, String(d.rung)),
                    h('td', {class: 'num'}, d.value === null ? '—' : d.value.toFixed(4)),
                    h('td', {class: 'num'}, d.threshold === null ? '—' : d.threshold.toFixed(4)),
                    h('td', {class: 'small'}, d.compared.map((c) =>
                      `${c.config} ${c.value === null ? '—' : c.value.toFixed(4)}`).join('; ')),
                    h('td', {}, h('span', {class: `badge state-${d.decision === 'stop' ? 'stopped' : 'succeeded'}`},
                        d.decision)))))))) : null,
        h('section', {class: 'card', id: 'trial-config'}, h('h2', {}, 'Config (resolved)'),
            h('pre', {class: 'code'}, JSON.stringify(trial.config, null, 2))));
  };

  const load = async ({charts: withCharts = true} = {}) => {
    try {
      trial = await api(`trials/${encodeURIComponent(id)}`);
    } catch (e) {
      replace(head, h('nav', {class: 'crumbs'}, h('a', {href: '#/'}, 'Sweeps')), errorBox(e));
      return;
    }
    if (!curves.isConnected) main.append(curves, diag, bottom);
    await renderHead();
    renderBottom();
    if (withCharts) {
      renderDiagnostics();
      await renderCurves();
    }
  };
  const refresh = debounce(() => load(), 1000);
  load();
  timer = setInterval(() => {
    if (trial?.state !== 'running') return;
    tick++;
    load({charts: tick % 3 === 0});
  }, 5000);

  return {
    onEvent(type, data) {
      if (type === 'trial' && trial && data.trial_id === trial.id) refresh();
    },
    destroy() {
      clearInterval(timer);
      refresh.cancel();
      charts.forEach((c) => c.then((x) => x.destroy()));
      diagView?.destroy();
    },
  };
}

// "0.4.0 · 1a2b3c4d5e6f · numerics …" from an attempt's build {version, commit, numerics}.
function buildText(b) {
  if (!b || typeof b !== 'object') return '-';
  const str = (v) => (v === null || v === undefined || v === '' ? null :
    typeof v === 'object' ? Object.entries(v).map(([k, x]) => `${k}=${typeof x === 'object' ? JSON.stringify(x) : x}`).join(' ') :
    String(v));
  const commit = str(b.commit);
  // The hash's first 12 characters, keeping "-dirty" (a build from a modified tree).
  const short = commit ? commit.replace(/^(.{12}).*?(-dirty)?$/, (m, hash, dirty) => hash + (dirty || '')) : null;
  const parts = [str(b.version), commit ? h('code', {title: commit}, short) : null,
    str(b.numerics) ? `numerics ${str(b.numerics)}` : null].filter(Boolean);
  return parts.length ? parts.flatMap((x, i) => (i ? [' · ', x] : [x])) : '-';
}

function stat(label, value) {
  return h('div', {class: 'stat'}, h('dt', {}, label), h('dd', {}, value));
}
