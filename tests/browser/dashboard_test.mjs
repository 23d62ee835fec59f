// Browser test of the web dashboard (label `web`): the real ablated (--http, --web-dir web/), one
// real ablate-worker on CPU slots, a small sweep submitted with the real `ablate` CLI, and Debian's
// Chromium (headless) driven by playwright-core. Checks, in order: the unauthenticated screen and
// 401s, the sweep appearing live, the worker page showing a running trial, state counts changing
// without a reload, the ablation table equal to `ablate results --format json`, curves drawn
// (coloured pixels on the canvas), the trial page, the workers page. Screenshots go to
// --artifacts (dashboard-*.png).
//
//   node dashboard_test.mjs --ablated BIN --worker BIN --cli BIN --trainer BIN --source-dir DIR
//                           [--artifacts DIR]
// Exit: 0 pass, 1 fail, 77 skip (no /usr/bin/chromium, no playwright-core or uPlot installed).
// ABLATE_WEB_TEST_KEEP=1 keeps the scratch folder (database, logs).
import {test, after} from 'node:test';
import assert from 'node:assert/strict';
import {spawn, execFile} from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {parseArgs, promisify} from 'node:util';
import {fileURLToPath} from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const {values: opt} = parseArgs({options: {
  ablated: {type: 'string'}, worker: {type: 'string'}, cli: {type: 'string'},
  trainer: {type: 'string'}, 'source-dir': {type: 'string'}, artifacts: {type: 'string'},
}});
for (const k of ['ablated', 'worker', 'cli', 'trainer', 'source-dir']) {
  if (!opt[k]) {
    console.error(`dashboard_test: --${k} is required`);
    process.exit(2);
  }
}
const CHROMIUM = '/usr/bin/chromium';
const source = path.resolve(opt['source-dir']);
const webDir = path.join(source, 'web');
const artifacts = path.resolve(opt.artifacts || path.join(os.tmpdir(), 'ablate-test-artifacts'));

function skip(why) {
  console.log(`SKIP: ${why}`);
  process.exit(77);
}
try {
  fs.accessSync(CHROMIUM, fs.constants.X_OK);
} catch {
  skip(`${CHROMIUM} is missing (apt-get install chromium; scripts/setup.sh does)`);
}
let chromium;
try {
  ({chromium} = await import(path.join(here, 'node_modules/playwright-core/index.mjs')));
} catch (e) {
  skip(`playwright-core is not installed in tests/browser/node_modules (npm ci there; scripts/setup.sh does): ${e.message}`);
}
if (!fs.existsSync(path.join(webDir, 'node_modules/uplot/dist/uPlot.esm.js'))) {
  skip('uPlot is not installed in web/node_modules (npm ci in web/; scripts/setup.sh does)');
}

// ---- processes ---------------------------------------------------------------------------------

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ablate_web_'));
const procs = [];
function start(name, bin, args) {
  const log = fs.openSync(path.join(dir, `${name}.log`), 'a');
  const p = spawn(bin, args, {stdio: ['ignore', log, log], env: {...process.env, OMP_WAIT_POLICY: 'passive'}});
  p.exited = new Promise((resolve) => p.on('exit', resolve));
  p.on('error', (e) => {
    p.failed = e;  // e.g. the binary is missing
  });
  p.logFile = path.join(dir, `${name}.log`);
  procs.push(p);
  return p;
}
async function stopAll() {
  for (const p of [...procs].reverse()) {
    if (!p.pid || p.exitCode !== null || p.signalCode !== null) continue;  // never started, or gone
    p.kill('SIGTERM');
    const t = setTimeout(() => p.kill('SIGKILL'), 8000);
    await p.exited;
    clearTimeout(t);
  }
}
// Last resort when setup throws before the tests (and their after hook) exist.
process.on('exit', () => procs.forEach((p) => p.exitCode === null && p.signalCode === null && p.kill('SIGKILL')));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function waitFile(file, ms, proc) {
  for (const end = Date.now() + ms; Date.now() < end; await sleep(100)) {
    if (fs.existsSync(file) && fs.readFileSync(file, 'utf8').trim()) return fs.readFileSync(file, 'utf8').trim();
    if (proc.failed || proc.exitCode !== null) {
      throw new Error(`${proc.spawnfile} did not start: ${proc.failed?.message ?? `exit ${proc.exitCode}`}\n` +
          fs.readFileSync(proc.logFile, 'utf8'));
    }
  }
  throw new Error(`${file} did not appear within ${ms} ms (logs in ${dir})`);
}
const run = promisify(execFile);
let env;
async function cli(...args) {
  const {stdout} = await run(opt.cli, args, {env});
  return stdout;
}

let browser = null;
after(async () => {
  await browser?.close().catch(() => {});
  await stopAll();
  if (process.env.ABLATE_WEB_TEST_KEEP === '1') console.log(`kept ${dir}`);
  else fs.rmSync(dir, {recursive: true, force: true});
});

let base, token, spec, context, page;
const pageErrors = [];
async function setup() {
  const coordDir = path.join(dir, 'coord');
  const ablated = start('ablated', opt.ablated, ['--data-dir', coordDir, '--grpc', '127.0.0.1:0', '--http', '127.0.0.1:0',
    '--web-dir', webDir]);
  const grpcAddr = await waitFile(path.join(coordDir, 'ablated.addr'), 20000, ablated);
  const httpAddr = await waitFile(path.join(coordDir, 'ablated.http'), 20000, ablated);
  token = fs.readFileSync(path.join(coordDir, 'token'), 'utf8').trim();
  base = `http://${httpAddr}`;
  env = {...process.env, ABLATE_COORDINATOR: grpcAddr, ABLATE_TOKEN_FILE: path.join(coordDir, 'token')};
  start('worker', opt.worker, ['--coordinator', grpcAddr, '--token-file', path.join(coordDir, 'token'),
    '--gpus', 'none', '--cpu-slots', '2', '--work-dir', path.join(dir, 'worker'),
    '--trainer', opt.trainer, '--data-root', dir]);

  // 2 axes x 2 seeds = 8 tiny CPU trials of a few seconds each (examples/sweeps/quick.yaml's model).
  spec = path.join(dir, 'web.yaml');
  fs.writeFileSync(spec, `name: web-dashboard
base:
  data:      {corpus: brown, val_fraction: 0.05, eval_batches: 2}
  model:     {seq_len: 64, layers: 2, d_model: 64, heads: 4, mlp: gelu, tie_embeddings: true}
  attention: {kind: sagebwd, qk_norm: true, smooth_k: true}
  optimizer: {kind: spectral, family: rms, p: 0.5, lr: 0.01, lr_vector: 0.003, newton_iters: 15}
  train:     {steps: 120, tokens_per_step: 1024, micro_batch: 16, warmup: 12, schedule: cosine,
              eval_every: 40, diagnostics_every: 40, checkpoint_every: 40, threads: 1}
  device: cpu
grid:
  attention.kind: [fpa, sagebwd]
  optimizer.p: [0, 0.5]
seeds: [0, 1]
order: grid
resources: {gpus: 0}
max_attempts: 2
`);

  fs.mkdirSync(artifacts, {recursive: true});
  // A fresh profile (--user-data-dir) in the scratch folder; playwright passes it to Chromium.
  context = await chromium.launchPersistentContext(path.join(dir, 'chromium-profile'), {
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    viewport: {width: 1280, height: 800},
  });
  browser = context;
  page = context.pages()[0] ?? await context.newPage();
  page.on('pageerror', (e) => pageErrors.push(e.message));
  page.on('console', (m) => {
    if (m.type() === 'error' && !/401|Unauthorized/.test(m.text())) pageErrors.push(m.text());
  });
}
try {
  await setup();
} catch (e) {
  // node:test's harness rethrows uncaught errors fatally (no 'exit' event): clean up here.
  console.error(`dashboard_test: setup failed: ${e.stack || e}`);
  procs.forEach((p) => p.kill('SIGKILL'));
  await browser?.close().catch(() => {});
  if (process.env.ABLATE_WEB_TEST_KEEP !== '1') fs.rmSync(dir, {recursive: true, force: true});
  else console.error(`kept ${dir}`);
  process.exit(1);
}
const shot = (name) => page.screenshot({path: path.join(artifacts, `dashboard-${name}.png`), fullPage: true});

// Coloured pixels of every canvas under `selector` (series are saturated; grid and axes are grey).
async function colouredPixels(selector) {
  return page.$$eval(`${selector} canvas`, (canvases) => canvases.map((c) => {
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    let n = 0;
    for (let i = 0; i < d.length; i += 4) {
      if (d[i + 3] > 128 && Math.max(d[i], d[i + 1], d[i + 2]) - Math.min(d[i], d[i + 1], d[i + 2]) > 60) n++;
    }
    return n;
  }));
}

// Coloured pixels of the canvases under `selector` once `count` of them have more than `min` each
// (drawing follows data fetches and live redraws: poll, do not sleep), or the last reading after
// `ms`; the caller asserts on it.
async function drawnCanvases(selector, count, min, ms = 15000) {
  let n = [];
  for (const end = Date.now() + ms; Date.now() < end; await sleep(100)) {
    n = await colouredPixels(selector);
    if (n.length === count && n.every((x) => x > min)) break;
  }
  return n;
}

// ---- the checks --------------------------------------------------------------------------------

test('unauthenticated requests are refused and the page says so', async () => {
  for (const p of ['/api/sweeps', '/api/workers', '/api/events']) {
    const r = await fetch(base + p);
    assert.equal(r.status, 401, p);
    assert.match((await r.json()).error, /token/);
  }
  const wrong = await fetch(`${base}/api/sweeps`, {headers: {Authorization: 'Bearer wrong'}});
  assert.equal(wrong.status, 401);
  const anon = await context.newPage();  // a fresh tab: no token in its sessionStorage
  await anon.goto(`${base}/`);
  await anon.locator('#unauthenticated').waitFor({timeout: 30000});
  assert.match(await anon.locator('#unauthenticated').innerText(), /token/i);
  assert.equal(await anon.evaluate(() => fetch('/api/sweeps').then((r) => r.status)), 401);
  await anon.screenshot({path: path.join(artifacts, 'dashboard-unauthenticated.png')});
  await anon.goto(`${base}/#token=not-the-token`);
  await anon.reload();
  await anon.locator('#unauthenticated .reason').filter({hasText: '401'}).waitFor({timeout: 30000});
  // A 401 that answers a request sent with an older token must not sign out the newer one: the
  // event stream's probe, sent with the wrong token, could be answered after the form below had
  // stored the right one, clearing it (CI: the form's sign-in never showed the sweeps).
  const stale = await anon.evaluate(async (good) => {
    const m = await import(new URL('js/api.js', location.href).href);
    m.setToken('an-older-token');
    const inFlight = m.api('sweeps').then(() => 200, (e) => e.status);  // sent with the older one
    m.setToken(good);
    return {status: await inFlight, kept: m.getToken() === good};
  }, token);
  assert.deepEqual(stale, {status: 401, kept: true});
  await anon.locator('#token-input').fill(token);  // the screen's sign-in form
  await anon.locator('.token-form button[type=submit]').click();
  await anon.locator('text=No sweeps yet').waitFor({timeout: 30000});
  await anon.close();
});

test('the token is taken from the address, kept and stripped', async () => {
  await page.goto(`${base}/#token=${token}`);
  await page.locator('#live.live-live').waitFor({timeout: 30000});
  assert.ok(!page.url().includes(token), `token still in the address: ${page.url()}`);
  assert.equal(await page.evaluate(() => sessionStorage.getItem('ablate.token')), token);
  await page.locator('text=No sweeps yet').waitFor({timeout: 30000});
});

test('a submitted sweep appears live, with progress', async () => {
  await page.evaluate(() => {
    window.__noReload = true;
  });
  const out = await cli('submit', spec);
  assert.match(out, /8 trials/);
  const row = page.locator('#sweeps-table tr', {hasText: 'web-dashboard'});
  await row.waitFor({timeout: 15000});
  await row.locator('.chip.state-running').waitFor({timeout: 30000});
  assert.equal(await page.evaluate(() => window.__noReload), true, 'the page reloaded');
  assert.ok(await row.locator('[role=progressbar]').count());
  await shot('sweeps');
});

test('the workers page shows the worker and its running trial', async () => {
  await page.goto(`${base}/#/workers`);
  const workers = JSON.parse(await cli('workers', '--format', 'json'));
  assert.equal(workers.length, 1);
  const id = workers[0].worker_id;
  const row = page.locator(`#workers-table tr[data-worker="${id}"]`);
  await row.waitFor({timeout: 30000});
  await row.locator('a.trial-link').first().waitFor({timeout: 30000});
  assert.match(await row.innerText(), /\/2 busy/);
  await shot('workers');
});

test('the sweep page updates its state counts live, and the sweep finishes', async () => {
  await page.locator('a[data-nav=sweeps]').click();
  await page.locator('#sweeps-table a', {hasText: 'web-dashboard'}).click();
  await page.locator('#trials-table').waitFor({timeout: 30000});
  await page.evaluate(() => {
    window.__noReload = true;
  });
  const succeeded = () => page.locator('#sweep-counts .chip.state-succeeded b').innerText();
  const before = Number(await succeeded());
  const seen = new Set([before]);
  for (const end = Date.now() + 150000; Date.now() < end; await sleep(250)) {
    const n = Number(await succeeded());
    if (!seen.has(n) && seen.size === 1) await shot('sweep-running');  // mid-run, for the record
    seen.add(n);
    if ((await page.locator('#sweep-status').innerText()) === 'finished') break;
  }
  assert.equal(await page.locator('#sweep-status').innerText(), 'finished', 'sweep did not finish');
  assert.ok(seen.size >= 2, `succeeded count never changed on the page (saw ${[...seen]})`);
  assert.equal(Number(await succeeded()), 8);
  assert.equal(await page.evaluate(() => window.__noReload), true, 'the page reloaded');
  // The trial table follows (server-side paging: 8 rows on one page).
  await page.locator('#trials-table tbody tr[data-state=succeeded]').nth(7).waitFor({timeout: 30000});
});

test('the ablation table equals `ablate results --format json`', async () => {
  const want = JSON.parse(await cli('results', 'web-dashboard', '--format', 'json'));
  assert.equal(want.length, 4);
  const cells = page.locator('#results td.result');
  // Wait until the table shows every group with its final metric (it refetches after events).
  await page.waitForFunction(() => {
    const c = [...document.querySelectorAll('#results td.result')];
    return c.length === 4 && c.every((x) => Number(x.dataset.n) === 2);
  }, null, {timeout: 15000});
  const got = await cells.evaluateAll((els) => els.map((e) => ({...e.dataset, best: e.classList.contains('best'),
    text: e.querySelector('.mean')?.textContent})));
  for (const w of want) {
    const keys = JSON.stringify([w['attention.kind'], w['optimizer.p']]);
    const g = got.find((x) => x.keys === keys);
    assert.ok(g, `no cell for ${keys}`);
    const close = (a, b, what) => assert.ok(Math.abs(Number(a) - b) <= 1e-12 * Math.max(1, Math.abs(b)),
        `${keys} ${what}: page ${a}, CLI ${b}`);
    close(g.mean, w.mean, 'mean');
    close(g.std, w.std, 'std');
    close(g.min, w.min, 'min');
    close(g.max, w.max, 'max');
    assert.equal(Number(g.n), w.n);
    assert.equal(Number(g.trials), w.trials);
    assert.equal(g.best, w.best, `${keys} best`);
    assert.equal(g.text, `${w.mean.toFixed(4)} ± ${w.std.toFixed(4)}`);
  }
  assert.equal(await page.locator('#results td.best').count(), 1);
});

test('curves and diagnostics render', async () => {
  await page.waitForFunction(() => /8 curves/.test(document.querySelector('#curves-note')?.textContent || ''),
      null, {timeout: 20000});
  const curves = await drawnCanvases('#curves-chart', 1, 1000);
  assert.equal(curves.length, 1);
  assert.ok(curves[0] > 1000, `curve canvas has ${curves[0]} coloured pixels`);
  assert.equal(await page.locator('#curves-section .legend li').count(), 2);  // fpa, sagebwd
  await page.locator('#diagnostics canvas').nth(1).waitFor({timeout: 15000});
  await page.waitForFunction(() => document.querySelectorAll('#diagnostics canvas').length === 2);
  for (const n of await drawnCanvases('#diagnostics', 2, 100)) assert.ok(n > 100, `diagnostics canvas: ${n} coloured pixels`);
  assert.equal(await page.locator('#diagnostics table.diag tbody tr').count(), 2);  // 2 layers
  await page.locator('#curves-color').selectOption('optimizer.p');
  await page.waitForFunction(() => /optimizer\.p = 0\.5/.test(document.querySelector('#curves-section .legend')?.textContent || ''));
  await page.locator('#curves-color').selectOption('attention.kind');
  await page.waitForFunction(() => /attention\.kind = sagebwd/.test(document.querySelector('#curves-section .legend')?.textContent || ''));
  await sleep(300);
  await shot('sweep');
});

test('the trial table pages, sorts and filters on the server', async () => {
  await page.locator('#page-size').selectOption('50');
  await page.locator('#sort-val_loss').click();
  await page.waitForFunction(() => document.querySelector('th[aria-sort] #sort-val_loss') !== null);
  const vals = await page.locator('#trials-table tbody tr td:nth-child(8)').allInnerTexts();
  const nums = vals.map(Number);
  assert.deepEqual(nums, [...nums].sort((a, b) => a - b), `val_loss not ascending: ${vals}`);
  await page.locator('select[data-axis="attention.kind"]').selectOption('fpa');
  await page.waitForFunction(() => /1–4 of 4/.test(document.querySelector('#trials-info')?.textContent || ''));
  const kinds = await page.locator('#trials-table tbody tr td:nth-child(3)').allInnerTexts();
  assert.deepEqual(kinds, ['fpa', 'fpa', 'fpa', 'fpa']);
  await page.locator('text=clear filters').click();
  await page.waitForFunction(() => /1–8 of 8/.test(document.querySelector('#trials-info')?.textContent || ''));
});

test('the trial page shows curves, config, attempts and log', async () => {
  const first = page.locator('#trials-table tbody tr').first();
  const id = await first.getAttribute('data-trial');
  await first.locator('a').first().click();
  await page.waitForURL(new RegExp(`#/trials/${id}$`));
  await page.locator('#trial-stats').filter({hasText: '120 / 120'}).waitFor({timeout: 30000});
  await page.locator('#trial-curves [data-metric=loss] canvas').waitFor({timeout: 15000});
  await page.locator('#trial-curves [data-metric=val_loss] canvas').waitFor({timeout: 15000});
  const loss = await drawnCanvases('#trial-curves [data-metric=loss]', 1, 200);
  assert.ok(loss[0] > 200, `loss canvas: ${loss[0]} coloured pixels`);
  assert.ok(await page.locator('#trial-curves canvas').count() >= 5);
  assert.match(await page.locator('#trial-config pre').innerText(), /"attention"/);
  await page.locator('#trial-attempts .badge.state-succeeded').waitFor();
  assert.ok(await page.locator('#trial-attempts details.log').count() >= 1);
  assert.ok(await page.locator('#trial-diagnostics canvas').count() === 2);
  await shot('trial');
});

test('no script errors', () => {
  assert.deepEqual(pageErrors, []);
});
