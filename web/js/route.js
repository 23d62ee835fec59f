// Hash routes: "#/path?key=value&...". A page's own state (sort, filters, chosen metric) lives in
// the query so a link reproduces the view; it is updated with replaceState, which does not fire
// 'hashchange', so changing a control never re-mounts the page.

export function parseHash() {
  const hash = location.hash.replace(/^#/, '') || '/';
  const q = hash.indexOf('?');
  const path = q >= 0 ? hash.slice(0, q) : hash;
  const params = new URLSearchParams(q >= 0 ? hash.slice(q + 1) : '');
  return {path: path || '/', params};
}

// Query state of the current page as a plain object of strings.
export function getState() {
  return Object.fromEntries(parseHash().params.entries());
}

// Merges `changes` into the query (null / '' removes a key) without re-routing.
export function setState(changes) {
  const {path, params} = parseHash();
  for (const [k, v] of Object.entries(changes)) {
    if (v === null || v === undefined || v === '') params.delete(k);
    else params.set(k, String(v));
  }
  const s = params.toString();
  history.replaceState(null, '', `${location.pathname}${location.search}#${path}${s ? '?' + s : ''}`);
}
