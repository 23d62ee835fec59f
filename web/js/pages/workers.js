// #/workers: every worker with its state, GPUs (busy ones marked; for each, the trials on it, the
// share given out and its memory: estimated for its trials and used as NVML reads it), CPU slots
// and running trials.
// Live: worker and trial events refetch (debounced); a 5 s tick keeps "last seen" current.
import {api} from '../api.js';
import {h, replace, fmtAgo, fmtBytes, debounce, errorBox, mapLimit} from '../util.js';

// Running trials whose details (sweep, step, GPUs of the attempt) are fetched per refresh.
const DETAIL_CAP = 64;

export function workersPage(main) {
  const body = h('div', {}, h('p', {class: 'muted'}, 'loading…'));
  const summary = h('p', {class: 'muted', id: 'workers-summary'});
  replace(main, h('h1', {}, 'Workers'), summary, body);

  const load = async () => {
    let workers;
    try {
      workers = (await api('workers')).workers;
    } catch (e) {
      replace(body, errorBox(e));
      return;
    }
    // Details of the running trials: step, sweep and which GPUs each attempt holds.
    const running = workers.flatMap((w) => w.running).slice(0, DETAIL_CAP);
    const details = new Map((await mapLimit(running, 4, (r) => api(`trials/${r.trial_id}`).catch(() => null)))
        .filter(Boolean).map((t) => [t.id, t]));
    const gpuOf = (t, attempt) => t?.attempts?.find((a) => a.attempt === attempt)?.gpus || [];
    const gpus = workers.reduce((a, w) => a + w.gpus.length, 0);
    const busy = workers.reduce((a, w) => a + w.busy_gpus.length, 0);
    const slots = workers.reduce((a, w) => a + w.cpu_slots, 0);
    const busySlots = workers.reduce((a, w) => a + w.busy_cpu_slots, 0);
    const nRunning = workers.reduce((a, w) => a + w.running.length, 0);
    replace(summary, `${workers.length} worker(s) · GPUs ${busy}/${gpus} busy · CPU slots ` +
        `${busySlots}/${slots} busy · ${nRunning} trial(s) running`);
    if (workers.length === 0) {
      replace(body, h('div', {class: 'empty-state'}, h('p', {}, 'No worker has registered.'),
          h('p', {class: 'muted'}, 'Start one: ', h('code', {},
              'ablate-worker --coordinator HOST:PORT --token-file TOKEN'))));
      return;
    }
    replace(body, h('div', {class: 'table-scroll'}, h('table', {class: 'data', id: 'workers-table'},
        h('thead', {}, h('tr', {}, ['worker', 'host', 'state', 'GPUs', 'CPU slots', 'running trials',
          'last seen', 'failures'].map((c) => h('th', {scope: 'col',
          class: c === 'CPU slots' || c === 'failures' ? 'num' : null}, c)))),
        h('tbody', {}, workers.map((w) => h('tr', {dataset: {worker: w.id}},
            h('th', {scope: 'row'}, w.id), h('td', {}, w.hostname || '-'),
            h('td', {}, h('span', {class: `badge worker-${w.state}`}, w.state)),
            h('td', {}, w.gpus.length === 0 ? h('span', {class: 'muted'}, 'none') :
              h('ul', {class: 'gpus'}, w.gpus.map((g) => {
                const isBusy = w.busy_gpus.includes(g.index);
                const load = (w.gpu_load || []).find((l) => l.index === g.index);
                const on = load?.trial_ids?.length ? load.trial_ids :
                  w.running.filter((r) => gpuOf(details.get(r.trial_id), r.attempt).includes(g.index))
                      .map((r) => r.trial_id);
                const share = load && load.share > 0 && load.share < 0.999 ? ` (${Math.round(100 * load.share)}% shared out)` : '';
                const mem = load && load.total_bytes > 0 ?
                  ` · memory ${fmtBytes(load.used_bytes)} used, ${fmtBytes(load.estimated_bytes)} estimated for its trials` : '';
                return h('li', {class: isBusy ? 'busy' : 'idle', title: g.uuid, dataset: {gpu: g.index, trials: on.length}},
                    h('span', {class: 'dot', 'aria-hidden': 'true'}),
                    `${g.index}: ${g.name || 'GPU'} ${fmtBytes(g.memory_bytes)} — `,
                    on.length ? on.map((id, i) => [i ? ', ' : '', h('a', {href: `#/trials/${id}`}, `trial #${id}`)]) :
                      (isBusy ? 'busy' : 'idle'), share, mem);
              }))),
            h('td', {class: 'num'}, w.cpu_slots ? `${w.busy_cpu_slots}/${w.cpu_slots} busy` : '-'),
            h('td', {}, w.running.length === 0 ? h('span', {class: 'muted'}, 'idle') :
              h('ul', {class: 'running'}, w.running.map((r) => {
                const t = details.get(r.trial_id);
                return h('li', {}, h('a', {class: 'trial-link', href: `#/trials/${r.trial_id}`}, `#${r.trial_id}`),
                    t ? h('span', {class: 'muted'}, ` ${t.step}/${t.total_steps || '?'} · ` +
                      Object.entries(t.axes || {}).map(([k, v]) => `${k}=${v}`).join(' ')) : null,
                    r.attempt > 1 ? ` (attempt ${r.attempt})` : '');
              }))),
            h('td', {class: 'nowrap'}, fmtAgo(w.last_seen_at)),
            h('td', {class: 'num'}, String(w.failures))))))));
  };
  const refresh = debounce(load, 800);
  load();
  const timer = setInterval(load, 5000);
  return {
    onEvent(type) {
      if (type === 'worker' || type === 'trial') refresh();
    },
    destroy() {
      clearInterval(timer);
      refresh.cancel();
    },
  };
}
