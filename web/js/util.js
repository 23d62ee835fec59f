// Small DOM and formatting helpers shared by the pages (no framework: pages build DOM with h()).

// h('a', {href: '#/', class: 'x', onclick: fn}, 'text', child, [more]) -> Element. Attributes set to
// null/undefined/false are skipped; `true` sets an empty attribute; on* keys add listeners; the
// `dataset` key takes an object. Children: strings, numbers, Nodes, arrays, null (skipped).
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (k === 'value' && 'value' in el) el.value = v;
    else if (k === 'checked' || k === 'selected') el[k] = Boolean(v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : String(c));
  }
}

// Replaces the children of `el`.
export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

export const STATES = ['queued', 'running', 'succeeded', 'failed', 'diverged', 'canceled', 'stopped'];

export function stateBadge(state) {
  return h('span', {class: `badge state-${state}`}, state || '-');
}

// Chips "3 running" for every non-zero state (or every state with `all`).
export function stateCounts(counts, {all = false} = {}) {
  return h('span', {class: 'counts'},
      STATES.filter((s) => all || (counts?.[s] ?? 0) > 0)
          .map((s) => h('span', {class: `chip state-${s}`, dataset: {state: s}},
              h('b', {}, String(counts?.[s] ?? 0)), ' ', s)));
}

// A stacked progress bar: finished states left to right, then running; queued is the remainder.
export function progressBar(counts, total) {
  const done = ['succeeded', 'failed', 'diverged', 'canceled', 'stopped'].reduce(
      (a, s) => a + (counts?.[s] ?? 0), 0);
  const pct = total > 0 ? Math.round((100 * done) / total) : 0;
  const bar = h('div', {
    class: 'progress', role: 'progressbar', 'aria-valuemin': 0, 'aria-valuemax': total,
    'aria-valuenow': done, 'aria-label': `${done} of ${total} trials finished`,
    title: `${done} / ${total} finished (${pct}%)`,
  });
  for (const s of ['succeeded', 'stopped', 'diverged', 'failed', 'canceled', 'running']) {
    const n = counts?.[s] ?? 0;
    if (n > 0 && total > 0) {
      bar.append(h('span', {class: `seg state-${s}`, style: `width:${(100 * n) / total}%`}));
    }
  }
  return h('div', {class: 'progress-wrap'}, bar, h('span', {class: 'pct'}, `${pct}%`));
}

// Metric values: 4 significant decimals for losses, fewer for large numbers (like `ablate`).
export function decimalsFor(v) {
  const a = Math.abs(v);
  if (a >= 10000) return 0;
  if (a >= 1000) return 1;
  if (a >= 100) return 2;
  return 4;
}

export function fmtNum(v, decimals) {
  if (v === null || v === undefined || !Number.isFinite(v)) return '-';
  if (decimals === undefined) {
    const a = Math.abs(v);
    if (a !== 0 && (a < 1e-3 || a >= 1e7)) return v.toExponential(3);
    decimals = Number.isInteger(v) ? 0 : decimalsFor(v);
  }
  return v.toFixed(decimals);
}

export function fmtTime(epochS) {
  if (!epochS) return '-';
  const d = new Date(epochS * 1000);
  const pad = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
      `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

export function fmtDuration(s) {
  if (s === null || s === undefined || !Number.isFinite(s) || s < 0) return '-';
  if (s < 60) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
  return `${Math.floor(s / 3600)} h ${Math.round((s % 3600) / 60)} min`;
}

export function fmtAgo(epochS) {
  if (!epochS) return '-';
  return `${fmtDuration(Math.max(0, Date.now() / 1000 - epochS))} ago`;
}

export function fmtBytes(b) {
  if (!b) return '-';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (b >= 1024 && i < units.length - 1) b /= 1024, i++;
  return `${b.toFixed(i ? 1 : 0)} ${units[i]}`;
}

// Axis values are text; numbers sort numerically and before the rest (as the server does).
export function axisCompare(a, b) {
  const na = a !== '' && Number.isFinite(Number(a));
  const nb = b !== '' && Number.isFinite(Number(b));
  if (na && nb) return Number(a) - Number(b);
  if (na !== nb) return na ? -1 : 1;
  return a < b ? -1 : a > b ? 1 : 0;
}

// Calls fn at most once per `ms`, after the last call of a burst (trailing debounce with a cap so
// a continuous stream of events still refreshes every `ms`).
export function debounce(fn, ms) {
  let timer = null;
  let first = 0;
  const run = () => {
    timer = null;
    first = 0;
    fn();
  };
  const d = () => {
    const now = Date.now();
    if (!first) first = now;
    clearTimeout(timer);
    timer = setTimeout(run, Math.max(0, Math.min(ms, first + 2 * ms - now)));
  };
  d.cancel = () => {
    clearTimeout(timer);
    timer = null;
    first = 0;
  };
  return d;
}

// Runs async jobs with at most `limit` in flight (the browser has 6 connections per host and the
// event stream holds one).
export async function mapLimit(items, limit, fn) {
  const out = new Array(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i], i);
    }
  };
  await Promise.all(Array.from({length: Math.min(limit, items.length)}, worker));
  return out;
}

// Why no connected worker can take a sweep's queued trials (the API's waiting_reason), or null
// when nothing waits for that: a visible notice, e.g. "Waiting: no worker is connected; ...".
export function waitingNotice(sweep, attrs = {}) {
  if (!sweep?.waiting_reason || (sweep.counts?.queued ?? 0) === 0) return null;
  return h(
      'div', {class: 'notice', role: 'status', ...attrs}, h('b', {}, 'Waiting: '),
      sweep.waiting_reason);
}

export function errorBox(err) {
  return h('div', {class: 'error', role: 'alert'}, String(err?.message || err));
}

// Chips for a trial's tags (an array of strings; anything else shows nothing).
export function tagList(tags) {
  if (!Array.isArray(tags) || tags.length === 0) return null;
  return h('span', {class: 'tags'}, tags.map((t) => h('span', {class: 'tag'}, String(t))));
}

// A config object as {"model.d_model": "64", ...}: dotted keys to leaves; arrays and scalars are
// leaves, written as JSON (so "1" and 1 differ).
export function flattenConfig(obj, prefix = '', out = {}) {
  for (const [k, v] of Object.entries(obj || {})) {
    const key = prefix ? `${prefix}.${k}` : k;
    if (v !== null && typeof v === 'object' && !Array.isArray(v) && Object.keys(v).length) {
      flattenConfig(v, key, out);
    } else {
      out[key] = JSON.stringify(v);
    }
  }
  return out;
}
