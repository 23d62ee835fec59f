// The trial table of a sweep: one page at a time from GET /api/sweeps/{id}/trials (server-side
// paging, sorting and filtering), so a 10,000-trial sweep costs one page per refresh. A checkbox per
// row selects trials (kept across pages and refreshes) for the compare view (#/compare?trials=...);
// a tags column appears when a trial of the page has tags or a note.
import {api} from '../api.js';
import {h, replace, stateBadge, fmtNum, fmtDuration, fmtAgo, errorBox, tagList} from '../util.js';

const PAGE_SIZES = [50, 100, 250, 1000];

export function trialsView(container, ctx) {
  const {sweep} = ctx;
  const info = h('span', {class: 'muted', id: 'trials-info', 'aria-live': 'polite'});
  const tableBox = h('div', {class: 'table-scroll'});
  const pager = h('nav', {class: 'pager', 'aria-label': 'trial table pages'});
  const selected = new Set();
  const compareBtn = h('button', {type: 'button', id: 'compare-selected', disabled: true, onclick: () => {
    location.hash = `#/compare?trials=${[...selected].sort((a, b) => a - b).join(',')}`;
  }});
  const clearBtn = h('button', {type: 'button', class: 'link', id: 'compare-clear', hidden: true, onclick: () => {
    selected.clear();
    for (const c of tableBox.querySelectorAll('input.select-trial')) c.checked = false;
    updateSelection();
  }}, 'clear selection');
  const updateSelection = () => {
    compareBtn.disabled = selected.size < 2;
    compareBtn.textContent = `compare selected (${selected.size})`;
    compareBtn.title = selected.size < 2 ? 'select two or more trials' : '';
    clearBtn.hidden = selected.size === 0;
  };
  updateSelection();
  replace(container, h('div', {class: 'section-head'}, h('h2', {}, 'Trials'), info, compareBtn, clearBtn),
      tableBox, pager);

  const state = () => {
    const s = ctx.getState();
    return {
      sort: s.sort || 'id',
      order: s.order || 'asc',
      offset: Math.max(0, Number(s.offset) || 0),
      limit: PAGE_SIZES.includes(Number(s.limit)) ? Number(s.limit) : 100,
    };
  };

  const baseColumns = [
    {key: 'select', label: 'select'},
    {key: 'id', label: 'id', sort: 'id', num: true},
    {key: 'state', label: 'state', sort: 'state'},
    ...sweep.axes.map((a) => ({key: `axis.${a}`, label: a, sort: `axis.${a}`})),
    {key: 'step', label: 'step', sort: 'step', num: true},
    {key: 'loss', label: 'loss', sort: 'loss', num: true},
    {key: 'val_loss', label: 'val_loss', sort: 'val_loss', num: true},
    {key: 'attempt', label: 'attempt', sort: 'attempt', num: true},
    {key: 'worker', label: 'worker'},
    {key: 'started', label: 'started', sort: 'started_at'},
    {key: 'duration', label: 'duration', sort: 'finished_at', num: true},
    {key: 'reason', label: 'reason'},
  ];
  const tagsColumn = {key: 'tags', label: 'tags / note'};

  const cellFor = (c, t) => {
    switch (c.key) {
      case 'select': return h('input', {type: 'checkbox', class: 'select-trial', checked: selected.has(t.id),
        'aria-label': `select trial #${t.id} to compare`, dataset: {trial: t.id}, onchange: (e) => {
          e.target.checked ? selected.add(t.id) : selected.delete(t.id);
          updateSelection();
        }});
      case 'tags': return [tagList(t.tags), t.note ? h('span', {class: 'note', title: t.note}, t.note) : null];
      case 'id': return h('a', {href: `#/trials/${t.id}`, id: `trial-link-${t.id}`}, `#${t.id}`);
      case 'state': return stateBadge(t.state);
      case 'step': return h('span', {class: 'step'}, `${t.step}/${t.total_steps || '?'}`,
          t.total_steps ? h('span', {class: 'mini-bar', 'aria-hidden': 'true'},
              h('span', {style: `width:${Math.min(100, (100 * t.step) / t.total_steps)}%`})) : null);
      case 'loss': return fmtNum(t.loss, 4);
      case 'val_loss': return fmtNum(t.val_loss, 4);
      case 'attempt': return t.attempt ? `${t.attempt}/${t.max_attempts}` : '-';
      case 'worker': return t.worker_id || '-';
      case 'started': return t.started_at ? h('span', {title: new Date(t.started_at * 1000).toISOString()}, fmtAgo(t.started_at)) : '-';
      case 'duration': return t.started_at ?
        fmtDuration((t.finished_at || Date.now() / 1000) - t.started_at) : '-';
      case 'reason': return t.reason ? h('span', {class: 'reason', title: t.reason}, t.reason) : '';
      default: return t.axes?.[c.key.slice(5)] ?? '-';
    }
  };

  let seq = 0;
  const load = async () => {
    const my = ++seq;
    const {sort, order, offset, limit} = state();
    let page;
    try {
      page = await api(`sweeps/${sweep.id}/trials`, {offset, limit, sort, order, ...ctx.filterParams()});
    } catch (e) {
      if (my === seq) replace(tableBox, errorBox(e));
      return;
    }
    if (my !== seq) return;  // a newer request superseded this one
    if (offset > 0 && offset >= page.total) {  // filters shrank the result below this page
      ctx.setState({offset: null});
      return load();
    }
    render(page);
  };

  const render = (page) => {
    const {sort, order, offset, limit} = state();
    const focusedId = document.activeElement?.id;
    const tagged = page.trials.some((t) => t.tags?.length || t.note);
    const columns = tagged ? [...baseColumns, tagsColumn] : baseColumns;
    const head = h('tr', {}, columns.map((c) => {
      const active = c.sort && c.sort === sort;
      const ariaSort = active ? (order === 'asc' ? 'ascending' : 'descending') : null;
      return h('th', {scope: 'col', class: c.num ? 'num' : null, 'aria-sort': ariaSort},
          c.sort ? h('button', {type: 'button', class: 'sort', id: `sort-${c.sort}`,
            title: `sort by ${c.label}`, onclick: () => {
              const next = active && order === 'asc' ? 'desc' : 'asc';
              ctx.setState({sort: c.sort, order: next, offset: null});
              load();
            }}, c.label, h('span', {class: 'arrow', 'aria-hidden': 'true'},
              active ? (order === 'asc' ? ' ▲' : ' ▼') : '')) : c.label);
    }));
    const rows = page.trials.map((t) => h('tr', {dataset: {trial: t.id, state: t.state}},
        columns.map((c) => h(c.key === 'id' ? 'th' : 'td', {class: c.num ? 'num' : null,
          scope: c.key === 'id' ? 'row' : null, dataset: {col: c.key}}, cellFor(c, t)))));
    replace(tableBox, h('table', {class: 'data trials', id: 'trials-table'},
        h('thead', {}, head),
        h('tbody', {}, rows.length ? rows :
          h('tr', {}, h('td', {colspan: columns.length, class: 'muted'}, 'no trials match the filters')))));
    const first = page.total ? offset + 1 : 0;
    const last = offset + page.trials.length;
    replace(info, `${first}–${last} of ${page.total.toLocaleString()} matching trials`);
    const go = (o) => () => {
      ctx.setState({offset: o || null});
      load();
    };
    const lastOffset = Math.max(0, Math.floor((page.total - 1) / limit) * limit);
    replace(pager,
        h('button', {type: 'button', id: 'page-first', disabled: offset === 0, onclick: go(0)}, '« first'),
        h('button', {type: 'button', id: 'page-prev', disabled: offset === 0, onclick: go(Math.max(0, offset - limit))}, '‹ prev'),
        h('span', {}, ` page ${Math.floor(offset / limit) + 1} of ${Math.max(1, Math.ceil(page.total / limit))} `),
        h('button', {type: 'button', id: 'page-next', disabled: last >= page.total, onclick: go(offset + limit)}, 'next ›'),
        h('button', {type: 'button', id: 'page-last', disabled: last >= page.total, onclick: go(lastOffset)}, 'last »'),
        h('label', {for: 'page-size'}, ' rows per page '),
        h('select', {id: 'page-size', onchange: (e) => {
          ctx.setState({limit: e.target.value, offset: null});
          load();
        }}, PAGE_SIZES.map((n) => h('option', {value: n, selected: n === limit}, String(n)))));
    if (focusedId) document.getElementById(focusedId)?.focus();
  };

  load();
  return {refresh: load};
}
