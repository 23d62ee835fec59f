// #/ : every sweep with its counts by state and progress, and a notice on a sweep whose queued
// trials no connected worker can take; live through 'changed' and 'worker' events. Archived sweeps
// (`archived: true`) are hidden unless "show archived" is on (query key `archived=1`); the list is
// always fetched with ?archived=1 so that the live counts of every sweep stay known.
import {api} from '../api.js';
import {getState, setState} from '../route.js';
import {debounce, errorBox, fmtTime, h, progressBar, replace, stateCounts, waitingNotice} from '../util.js';

export function sweepsPage(main) {
  const body = h('div', {}, h('p', {class: 'muted'}, 'loading…'));
  const toggle = h('label', {class: 'check'}, h('input', {type: 'checkbox', id: 'show-archived',
    checked: getState().archived === '1', onchange: (e) => {
      setState({archived: e.target.checked ? '1' : null});
      render();
    }}), 'show archived');
  const hiddenNote = h('span', {class: 'muted small', id: 'archived-hidden'});
  replace(main, h('div', {class: 'title-row'}, h('h1', {}, 'Sweeps'), toggle, hiddenNote), body);
  let sweeps = [];

  const render = () => {
    const showArchived = getState().archived === '1';
    const archived = sweeps.filter((s) => s.archived === true).length;
    replace(hiddenNote, archived && !showArchived ? `${archived} archived hidden` : '');
    const shown = showArchived ? sweeps : sweeps.filter((s) => s.archived !== true);
    if (shown.length === 0 && archived > 0) {
      replace(body, h('div', {class: 'empty-state'}, h('p', {}, 'Every sweep is archived: tick "show archived".')));
      return;
    }
    if (sweeps.length === 0) {
      replace(body, h('div', {class: 'empty-state'},
          h('p', {}, 'No sweeps yet.'),
          h('p', {class: 'muted'}, 'Submit one: ', h('code', {}, 'ablate submit examples/sweeps/quick.yaml'))));
      return;
    }
    const rows = [...shown]
                     .sort((a, b) => b.id - a.id)
                     .map(
                         (s) => h(
                             'tr', {dataset: {sweep: s.id}}, h('td', {class: 'num'}, String(s.id)),
                             h('th', {scope: 'row'}, h('a', {href: `#/sweeps/${s.id}`}, s.name),
                               s.archived === true ? h('span', {class: 'badge archived'}, 'archived') : null),
                             h('td', {},
                               s.finished ? h('span', {class: 'muted'}, 'finished') :
                                            h('span', {class: 'active'}, 'active')),
                             h('td', {class: 'counts-cell'}, stateCounts(s.counts),
                               waitingNotice(s, {dataset: {waiting: s.id}})),
                             h('td', {class: 'progress-cell'}, progressBar(s.counts, s.total)),
                             h('td', {class: 'num'}, String(s.total)),
                             h('td', {class: 'muted'}, (s.axes || []).join(' × ') || '-'),
                             h('td', {class: 'muted nowrap'}, fmtTime(s.created_at))));
    replace(body, h('table', {class: 'data', id: 'sweeps-table'},
        h('thead', {}, h('tr', {}, ['id', 'name', 'status', 'trials by state', 'progress', 'trials',
          'axes', 'created'].map((c) => h('th', {scope: 'col'}, c)))),
        h('tbody', {}, rows)));
  };

  const load = async () => {
    try {
      sweeps = (await api('sweeps', {archived: 1})).sweeps;
      render();
    } catch (e) {
      replace(body, errorBox(e));
    }
  };
  const refetch = debounce(load, 500);
  load();

  return {
    onEvent(type, data) {
      if (type === 'changed') {
        // Counts arrive in the event itself: update in place, refetch only for unknown sweeps.
        let unknown = false;
        for (const c of data.sweeps || []) {
          const s = sweeps.find((x) => x.id === c.id);
          if (!s) {
            unknown = true;
            continue;
          }
          const counts = {};
          for (const st of Object.keys(s.counts)) counts[st] = c.counts?.[st] ?? 0;
          s.counts = counts;
          s.total = c.total;
          s.finished = (counts.queued ?? 0) + (counts.running ?? 0) === 0;
        }
        if (unknown || (data.sweeps || []).length !== sweeps.length) refetch();
        else render();
      } else if (type === 'sweep' || type === 'worker') {
        // A new sweep, or a worker that came or went (waiting_reason may change).
        refetch();
      }
    },
    destroy() {
      refetch.cancel();
    },
  };
}
