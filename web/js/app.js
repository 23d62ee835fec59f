// The dashboard's entry point: sign-in (token), hash routing, one event stream feeding the page.
import {takeTokenFromUrl, getToken, setToken, clearToken, api, openEvents} from './api.js';
import {parseHash} from './route.js';
import {h, replace} from './util.js';
import {sweepsPage} from './pages/sweeps.js';
import {sweepPage} from './pages/sweep.js';
import {trialPage} from './pages/trial.js';
import {workersPage} from './pages/workers.js';
import {comparePage} from './pages/compare.js';

const ROUTES = [
  [/^\/(sweeps\/?)?$/, sweepsPage, 'Sweeps', 'sweeps'],
  [/^\/sweeps\/([^/]+)$/, sweepPage, 'Sweep', 'sweeps'],
  [/^\/trials\/(\d+)$/, trialPage, 'Trial', 'sweeps'],
  [/^\/compare\/?$/, comparePage, 'Compare', 'sweeps'],
  [/^\/workers\/?$/, workersPage, 'Workers', 'workers'],
];

const main = document.getElementById('main');
const live = document.getElementById('live');
let page = null;
let events = null;
let started = false;

function setLive(status) {
  const text = {live: 'live', connecting: 'connecting…', down: 'disconnected'}[status] || status;
  live.className = `live live-${status}`;
  live.textContent = text;
  live.title = status === 'live' ? 'receiving server-sent events from ablated' :
    'no event stream: retrying (data may be stale)';
}

function route() {
  page?.destroy?.();
  page = null;
  const {path} = parseHash();
  for (const [re, mount, title, nav] of ROUTES) {
    const m = path.match(re);
    if (!m) continue;
    document.title = `${title} · ablate`;
    for (const a of document.querySelectorAll('header nav a')) {
      a.toggleAttribute('aria-current', a.dataset.nav === nav);
    }
    page = mount(main, m.slice(1).filter((x) => x !== undefined).map(decodeURIComponent));
    return;
  }
  document.title = 'Not found · ablate';
  replace(main, h('h1', {}, 'Not found'), h('p', {}, `No page at ${path}. `, h('a', {href: '#/'}, 'Sweeps')));
}

window.addEventListener('hashchange', () => {
  if (!started) return;  // the sign-in screen stays until a token is accepted
  route();
  main.focus({preventScroll: true});
});

function start() {
  document.body.classList.remove('signed-out');
  if (!started) events = openEvents((type, data) => page?.onEvent?.(type, data), setLive);
  started = true;
  route();
}

// The unauthenticated screen: why, where the dashboard URL comes from, and a token field.
function signedOut(reason) {
  page?.destroy?.();
  page = null;
  events?.close();
  events = null;
  started = false;
  setLive('down');
  document.body.classList.add('signed-out');
  document.title = 'Sign in · ablate';
  const input = h('input', {type: 'password', id: 'token-input', autocomplete: 'off',
    spellcheck: 'false', required: true, 'aria-describedby': 'token-help'});
  const msg = h('p', {class: 'error', role: 'alert', hidden: true});
  const form = h('form', {class: 'token-form', onsubmit: async (e) => {
    e.preventDefault();
    setToken(input.value);
    try {
      await api('sweeps');
      start();
    } catch (err) {
      msg.hidden = false;
      msg.textContent = err.status === 401 ? 'That token was refused.' : String(err.message);
    }
  }}, h('label', {for: 'token-input'}, 'Token'), input, h('button', {type: 'submit'}, 'Sign in'));
  replace(main, h('div', {class: 'unauth', id: 'unauthenticated'},
      h('h1', {}, 'Unauthenticated'),
      h('p', {class: 'reason'}, reason),
      h('p', {}, 'The dashboard reads ablated\'s HTTP API, which needs the coordinator\'s bearer token. ',
          'Open the dashboard with its full address, which carries the token once (it is then kept in this ',
          'tab only and removed from the address bar):'),
      h('ul', {},
          h('li', {}, h('code', {}, 'scripts/run.sh'), ' prints it: ', h('code', {}, 'dashboard: http://127.0.0.1:PORT/#token=…')),
          h('li', {}, 'for any ', h('code', {}, 'ablated --data-dir DIR --http HOST:PORT'), ', build it from the files it writes:',
              h('pre', {class: 'code'}, 'echo "http://$(cat DIR/ablated.http)/#token=$(cat DIR/token)"'),
              h('span', {class: 'muted'}, '(DIR defaults to ~/.ablate; scripts/run.sh uses out/local/coordinator)'))),
      h('p', {id: 'token-help'}, 'Or paste the token (the content of the token file):'),
      form, msg));
  input.focus();
}

window.addEventListener('ablate:unauth', (e) => {
  signedOut(`The server refused the token (401): ${e.detail}`);
});

document.getElementById('skip').addEventListener('click', () => main.focus());
document.getElementById('sign-out').addEventListener('click', () => {
  clearToken();
  signedOut('Signed out.');
});

takeTokenFromUrl();
if (getToken()) start();
else signedOut('No token in this tab.');
