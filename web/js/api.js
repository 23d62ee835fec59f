// The dashboard's only door to ablated: token handling, JSON fetches, the event stream.
//
// The token arrives once in the address (`/#token=...` or `?token=...`), is kept in this tab's
// sessionStorage and removed from the address bar (so it is not bookmarked or shared by accident).
// Fetches send it as `Authorization: Bearer`; only EventSource, which cannot set headers, sends it
// as `?token=`. A 401 clears it and raises the "unauthenticated" screen (event 'ablate:unauth'),
// but only while the refused token is still this tab's token: a request sent with an old token (the
// event stream's probe, a page's fetch in flight) that is answered after the user signed in with a
// new one must not sign the new one out.

const KEY = 'ablate.token';

export function getToken() {
  return sessionStorage.getItem(KEY) || '';
}

export function setToken(token) {
  sessionStorage.setItem(KEY, token.trim());
}

export function clearToken() {
  sessionStorage.removeItem(KEY);
}

// Moves a token found in the address into sessionStorage and rewrites the address without it.
// Accepts `?token=T`, `#token=T`, `#token=T&/sweeps/1` and `#/sweeps/1?token=T`.
export function takeTokenFromUrl() {
  const url = new URL(location.href);
  let token = url.searchParams.get('token');
  url.searchParams.delete('token');
  let hash = url.hash.replace(/^#/, '');
  const q = hash.indexOf('?');
  let path = q >= 0 ? hash.slice(0, q) : hash;
  let params = new URLSearchParams(q >= 0 ? hash.slice(q + 1) : '');
  if (/^token=/.test(path)) {  // "#token=T" or "#token=T&/route"
    const p = new URLSearchParams(path);
    token = p.get('token') || token;
    path = [...p.keys()].find((k) => k.startsWith('/')) || '';
  }
  if (params.has('token')) {
    token = params.get('token') || token;
    params.delete('token');
  }
  if (!token) return false;
  setToken(token);
  const rest = params.toString();
  const newHash = path || rest ? `#${path || '/'}${rest ? '?' + rest : ''}` : '';
  history.replaceState(null, '', url.pathname + url.search + newHash);
  return true;
}

export class ApiError extends Error {
  constructor(status, message, path) {
    super(message);
    this.status = status;
    this.path = path;
  }
}

// Query string from an object; arrays repeat the key, null/undefined/'' are left out.
export function qs(params) {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) {
    if (v === null || v === undefined || v === '') continue;
    if (Array.isArray(v)) v.forEach((x) => p.append(k, x));
    else p.append(k, v);
  }
  const s = p.toString();
  return s ? `?${s}` : '';
}

// GET /api/<path> as JSON. Throws ApiError with the server's {"error"} message.
export async function api(path, params, {signal} = {}) {
  const url = `api/${path}${qs(params)}`;
  const token = getToken();
  let res;
  try {
    res = await fetch(url, {headers: {Authorization: `Bearer ${token}`}, signal});
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError(0, `cannot reach ablated (${e.message})`, path);
  }
  let body = null;
  try {
    body = await res.json();
  } catch {
    body = null;
  }
  if (!res.ok) {
    const msg = body?.error || `HTTP ${res.status}`;
    if (res.status === 401 && getToken() === token) {  // not a stale answer to an older token
      clearToken();
      window.dispatchEvent(new CustomEvent('ablate:unauth', {detail: msg}));
    }
    throw new ApiError(res.status, msg, path);
  }
  return body;
}

// One EventSource on /api/events; `onEvent(type, data)` for 'trial', 'sweep', 'worker', 'changed',
// `onStatus('live'|'connecting'|'down')`. The browser reconnects by itself (and resumes after the
// last event id); when it gives up (the server refused: 401 or 503) we probe the API, which raises
// the unauthenticated screen on 401, and retry after a pause.
export function openEvents(onEvent, onStatus) {
  let es = null;
  let retry = null;
  let closed = false;
  const connect = () => {
    if (closed) return;
    onStatus('connecting');
    es = new EventSource(`api/events?token=${encodeURIComponent(getToken())}`);
    es.onopen = () => onStatus('live');
    es.onerror = () => {
      if (es.readyState === EventSource.CLOSED) {
        onStatus('down');
        api('sweeps').catch(() => {});
        retry = setTimeout(connect, 5000);
      } else {
        onStatus('connecting');
      }
    };
    for (const type of ['trial', 'sweep', 'worker', 'changed', 'event']) {
      es.addEventListener(type, (e) => {
        let data = null;
        try {
          data = JSON.parse(e.data);
        } catch {
          return;
        }
        onEvent(type, data);
      });
    }
  };
  connect();
  return {
    close() {
      closed = true;
      clearTimeout(retry);
      es?.close();
    },
  };
}
