// Browser test of the web dashboard (label `web`): the real ablated (--http, --web-dir web/), one
// real ablate-worker on CPU slots, a small sweep submitted with the real `ablate` CLI, and Debian's
// Chromium (headless) driven by playwright-core. Checks, in order: the unauthenticated screen and
// 401s, the sweep appearing live, the worker page showing a running trial, state counts changing
// without a reload, the ablation table equal to `ablate results --format json`, the paired
// comparison equal to `ablate compare --format json` (figures and verdicts), the curves' mean ± band
// over seeds equal to a computation from the API's series (plain, EMA-smoothed, t interval, by
// tokens) and its band drawn (pixels of its fill colour), the hover readout, the trial table's
// server-side paging, sorting and filtering, the trial page, the compare view (only the config keys
// that differ, curves of both trials), tags / note / build per attempt / archived as the CLI set
// them, and an early-stopping sweep (stopped counts, every judgment with its threshold, the
// trial page's judgments). Screenshots go to --artifacts (dashboard-*.png).
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

  // 2 axes x 3 seeds = 12 tiny CPU trials of a few seconds each (examples/sweeps/quick.yaml's
  // model): 3 seeds per arm, so the paired comparison has intervals (n >= 3) and the curves a band.
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
seeds: [0, 1, 2]
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

// GET /api/<p> with the token, as JSON.
async function apiGet(p) {
  const r = await fetch(`${base}/api/${p}`, {headers: {Authorization: `Bearer ${token}`}});
  assert.equal(r.status, 200, `GET /api/${p}`);
  return r.json();
}

const near = (got, want, rel, what) => assert.ok(
    Number.isFinite(got) && Math.abs(got - want) <= rel * Math.max(1, Math.abs(want)),
    `${what}: page ${got}, expected ${want}`);

// The test sweep's arms computed here from the API's series (not downsampled: 120 points <= 300):
// key JSON [attention.kind, optimizer.p] -> {steps, seeds: [values of each seed, by trial id]}.
async function armsFromApi(metric) {
  const sweep = (await apiGet('sweeps')).sweeps.find((x) => x.name === 'web-dashboard');
  const {trials} = await apiGet(`sweeps/${sweep.id}/trials?limit=100&sort=id`);
  const arms = new Map();
  for (const t of trials) {
    const series = await apiGet(`trials/${t.id}/series?name=${metric}&points=300`);
    assert.equal(series.total_points, series.steps.length, `trial ${t.id}: the series is downsampled`);
    const key = JSON.stringify([t.axes['attention.kind'], t.axes['optimizer.p']]);
    if (!arms.has(key)) arms.set(key, {steps: series.steps, seeds: []});
    assert.deepEqual(series.steps, arms.get(key).steps, `trial ${t.id}: the seeds of an arm have other steps`);
    arms.get(key).seeds.push(series.values);
  }
  return arms;
}

// Mean and band half-width at every step: EMA s = a s + (1 - a) y per seed (from the first
// point), then mean and `t` x the standard error over the seeds.
function expectedArm(arm, {ema = 0, t = 1}) {
  const seeds = arm.seeds.map((v) => {
    let sm = null;
    return v.map((y) => (sm = sm === null ? y : ema * sm + (1 - ema) * y));
  });
  const n = seeds.length;
  return arm.steps.map((_, i) => {
    const v = seeds.map((x) => x[i]);
    const m = v.reduce((a, b) => a + b, 0) / n;
    return {m, half: t * Math.sqrt(v.reduce((a, b) => a + (b - m) ** 2, 0) / (n - 1) / n)};
  });
}

// The curves' data-agg (the drawn arms) against expectedArm; `xScale`: x = step * xScale. Polls
// (the chart redraws after the data fetches and refetches after the last events), then asserts.
async function checkArms(arms, opts, xScale, tol, ms = 20000) {
  for (const end = Date.now() + ms; ; await sleep(250)) {
    try {
      return await compareArms(arms, opts, xScale, tol);
    } catch (e) {
      if (Date.now() > end) throw e;
    }
  }
}

async function compareArms(arms, opts, xScale, tol) {
  const agg = JSON.parse(await page.locator('#curves-chart').getAttribute('data-agg') || '{"arms": []}');
  assert.equal(agg.arms.length, 4, 'arms');
  for (const a of agg.arms) {
    const key = JSON.stringify(a.keys);
    const want = arms.get(key);
    assert.ok(want, `an arm the API does not have: ${key}`);
    assert.equal(a.n, 3, `${key}: seeds`);
    assert.deepEqual(a.x, want.steps.map((st) => st * xScale), `${key}: x`);
    expectedArm(want, opts).forEach(({m, half}, i) => {
      near(a.mean[i], m, 1e-9, `${key} mean at ${want.steps[i]}`);
      near(a.hi[i] - a.mean[i], half, tol, `${key} upper half-width at ${want.steps[i]}`);
      near(a.mean[i] - a.lo[i], half, tol, `${key} lower half-width at ${want.steps[i]}`);
    });
  }
}

// Pixels of the canvases under `selector` in the band fill: palette colour 0 or 1 at alpha 0x38
// (uPlot's canvas is transparent; where two bands or a line overlap, the alpha or colour differs).
async function bandPixels(selector) {
  return page.$$eval(`${selector} canvas`, (canvases) => {
    const fills = [[0x00, 0x72, 0xb2], [0xe6, 0x9f, 0x00]];
    let n = 0;
    for (const c of canvases) {
      const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
      for (let i = 0; i < d.length; i += 4) {
        if (Math.abs(d[i + 3] - 0x38) <= 4 && fills.some((f) => Math.abs(d[i] - f[0]) <= 6 &&
            Math.abs(d[i + 1] - f[1]) <= 6 && Math.abs(d[i + 2] - f[2]) <= 6)) n++;
      }
    }
    return n;
  });
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
  assert.match(out, /12 trials/);
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
  assert.equal(Number(await succeeded()), 12);
  assert.equal(await page.evaluate(() => window.__noReload), true, 'the page reloaded');
  // The trial table follows (server-side paging: 12 rows on one page).
  await page.locator('#trials-table tbody tr[data-state=succeeded]').nth(11).waitFor({timeout: 30000});
});

test('the ablation table equals `ablate results --format json`', async () => {
  const want = JSON.parse(await cli('results', 'web-dashboard', '--format', 'json'));
  assert.equal(want.length, 4);
  const cells = page.locator('#results td.result');
  // Wait until the table shows every group with its final metric (it refetches after events).
  await page.waitForFunction(() => {
    const c = [...document.querySelectorAll('#results td.result')];
    return c.length === 4 && c.every((x) => Number(x.dataset.n) === 3);
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
    close(g.se, w.se, 'se');
    close(g.ciLow, w.ci_low, 'ci_low');
    close(g.ciHigh, w.ci_high, 'ci_high');
    close(g.min, w.min, 'min');
    close(g.max, w.max, 'max');
    assert.equal(Number(g.n), w.n);
    assert.equal(Number(g.trials), w.trials);
    assert.equal(Number(g.diverged), w.diverged);
    assert.equal(Number(g.builds), w.builds);
    assert.equal(g.best, w.best, `${keys} best`);
    assert.equal(g.text, `${w.mean.toFixed(4)} ± ${w.se.toFixed(4)}`);
  }
  // A best only where the CLI has one (its interval apart from every other cell's).
  assert.equal(await page.locator('#results td.best').count(), want.filter((w) => w.best).length);
});

test('the paired comparison equals `ablate compare --format json`', async () => {
  for (const by of [[], ['optimizer.p']]) {
    const want = JSON.parse(await cli('compare', 'web-dashboard', '--factor', 'attention.kind',
        ...(by.length ? ['--by', by.join(',')] : []), '--format', 'json'));
    assert.equal(want.length, by.length ? 2 : 1);
    await page.locator('#paired-factor').selectOption('attention.kind');
    const box = page.locator('#paired-section input[value="optimizer.p"]');
    if ((await box.isChecked()) !== by.length > 0) await box.click();
    await page.waitForFunction((n) => {
      const rows = [...document.querySelectorAll('#paired tbody tr')];
      return rows.length === n && rows.every((r) => JSON.parse(r.dataset.row).n === 3);
    }, want.length, {timeout: 15000});
    const got = await page.locator('#paired tbody tr').evaluateAll((rows) => rows.map((r) => ({
      row: JSON.parse(r.dataset.row), verdict: r.querySelector('.verdict').textContent,
      delta: r.querySelector('td.delta').textContent, p: r.querySelector('td.p-holm').textContent,
      mean: r.querySelector('td.mean').textContent})));
    for (const w of want) {
      const g = got.find((x) => x.row.value === w.value && by.every((a, i) => x.row.cell[i] === w[a]));
      assert.ok(g, `no row for ${JSON.stringify(w)}`);
      assert.equal(g.row.baseline, w.baseline);
      assert.equal(g.row.test, w.test);
      assert.equal(g.row.n, w.n);
      for (const f of ['mean', 'baseline_mean', 'delta', 'ci_low', 'ci_high', 'p_value', 'p_adjusted']) {
        assert.ok(w[f] !== null, `the CLI has no ${f} (n = ${w.n})`);
        near(g.row[f], w[f], 1e-12, `${w.value} ${f}`);
      }
      assert.equal(g.verdict, w.verdict, 'verdict (the CLI\'s words)');
      assert.equal(g.delta, `${w.delta.toFixed(4)} [${w.ci_low.toFixed(4)}, ${w.ci_high.toFixed(4)}]`.replace(/-(0\.0000)/g, '$1'));
      assert.equal(g.p, w.p_adjusted.toFixed(4));
      assert.equal(g.mean, String(Number(w.mean.toPrecision(6))));
    }
    assert.match(await page.locator('#paired-note').innerText(),
        new RegExp(`Holm-adjusted over the ${want.length} comparisons? shown`));
  }
  // Each kind at its own best spectral power (a nuisance axis here): the same choice and figures
  // as `ablate compare --best-over`.
  const box = page.locator('#paired-section input[value="optimizer.p"]');
  if (await box.isChecked()) await box.click();
  const want = JSON.parse(await cli('compare', 'web-dashboard', '--factor', 'attention.kind',
      '--best-over', 'optimizer.p', '--format', 'json'));
  assert.equal(want.length, 1);
  await page.locator('#paired-best').selectOption('optimizer.p');
  await page.waitForFunction(() => document.querySelector('#paired td.best-value') !== null, null,
      {timeout: 15000});
  const got = await page.locator('#paired tbody tr').evaluateAll((rows) => rows.map((r) => ({
    row: JSON.parse(r.dataset.row), best: r.querySelector('td.best-value').textContent,
    baseBest: r.querySelector('td.baseline-best-value').textContent})));
  assert.equal(got.length, 1);
  assert.equal(got[0].best, want[0].best_value);
  assert.equal(got[0].baseBest, want[0].baseline_best_value);
  for (const f of ['mean', 'baseline_mean', 'delta', 'p_value']) near(got[0].row[f], want[0][f], 1e-12, f);
  assert.match(await page.locator('#paired-note').innerText(), /--best-over optimizer\.p/);
  await page.locator('#paired-best').selectOption('');
  await shot('sweep-paired');
});

test('curves: mean ± band over seeds, equal to the API\'s series; EMA, t interval, tokens, hover', async () => {
  await page.waitForFunction(() => /4 arms of 12 curves/.test(document.querySelector('#curves-note')?.textContent || ''),
      null, {timeout: 20000});
  const arms = await armsFromApi('loss');
  assert.match(await page.locator('#curves-desc').innerText(), /mean ± SE over 3 seeds per arm/);
  await checkArms(arms, {}, 1, 1e-9);
  const curves = await drawnCanvases('#curves-chart', 1, 1000);
  assert.ok(curves[0] > 1000, `curve canvas has ${curves[0]} coloured pixels`);
  assert.equal(await page.locator('#curves-section .legend li').count(), 2);  // fpa, sagebwd

  // EMA and the 95% t interval (t(0.975, 2) = 0.95 / sqrt(2 * 0.975 * 0.025) in closed form).
  await page.locator('#curves-ema').fill('0.9');
  await page.locator('#curves-ema').press('Enter');
  await page.locator('#curves-band').selectOption('t95');
  await page.waitForFunction(() => /95% t interval.*EMA 0\.9 per trial before averaging/.test(
      document.querySelector('#curves-desc')?.textContent || ''), null, {timeout: 10000});
  await checkArms(arms, {ema: 0.9, t: 0.95 / Math.sqrt(2 * 0.975 * 0.025)}, 1, 1e-5);
  // The seeds' losses barely differ (a band a pixel or two high): grad_norm varies more by seed.
  await page.locator('#curves-metric').selectOption('grad_norm');
  const norms = await armsFromApi('grad_norm');
  await checkArms(norms, {ema: 0.9, t: 0.95 / Math.sqrt(2 * 0.975 * 0.025)}, 1, 1e-5);
  let band = 0;
  for (const end = Date.now() + 10000; Date.now() < end && band <= 1000; await sleep(100)) {
    band = await bandPixels('#curves-chart');
  }
  assert.ok(band > 1000, `${band} pixels of the band's fill colour`);

  // Hover: every arm's value at the cursor's x.
  // (hover scrolls the chart into view first; a bare mouse move below the viewport reaches nothing)
  const over = page.locator('#curves-chart .u-over');
  const bb = await over.boundingBox();
  await over.hover({position: {x: bb.width * 0.5, y: bb.height * 0.5}});
  await page.waitForFunction(() => document.querySelectorAll('#curves-chart .chart-readout li').length === 4);
  for (const li of await page.locator('#curves-chart .chart-readout li').allInnerTexts()) {
    // (innerText breaks lines where the readout wraps: compare the words)
    assert.match(li.replace(/\s+/g, ' '), /n=3\): \d[\d.e+-]* ± \d[\d.e+-]*$/, `readout: ${li}`);
  }
  await shot('sweep-curves');
  await page.mouse.move(0, 0);
  await page.locator('#curves-metric').selectOption('loss');

  // x by tokens: the trainer's `tokens` series (step x 1024 tokens per step) mapped onto the steps.
  await page.locator('#curves-x').selectOption('tokens');
  await page.waitForFunction(() => JSON.parse(document.querySelector('#curves-chart')?.dataset.agg || '{}').x === 'tokens',
      null, {timeout: 15000});
  await checkArms(arms, {ema: 0.9, t: 0.95 / Math.sqrt(2 * 0.975 * 0.025)}, 1024, 1e-5);
  await page.locator('#curves-x').selectOption('step');
  await page.locator('#curves-ema').fill('0');
  await page.locator('#curves-ema').press('Enter');
  await page.locator('#curves-band').selectOption('se');
  // Each trial its own line: 12 curves.
  await page.locator('#curves-agg').selectOption('trials');
  await page.waitForFunction(() => /^12 curves/.test(document.querySelector('#curves-note')?.textContent || ''));
  await page.locator('#curves-agg').selectOption('mean');
  await page.waitForFunction(() => /mean ± SE over 3 seeds/.test(document.querySelector('#curves-desc')?.textContent || ''));
});

test('diagnostics render', async () => {
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
  const vals = await page.locator('#trials-table tbody tr td[data-col=val_loss]').allInnerTexts();
  const nums = vals.map(Number);
  assert.deepEqual(nums, [...nums].sort((a, b) => a - b), `val_loss not ascending: ${vals}`);
  await page.locator('select[data-axis="attention.kind"]').selectOption('fpa');
  await page.waitForFunction(() => /1–6 of 6/.test(document.querySelector('#trials-info')?.textContent || ''));
  const kinds = await page.locator('#trials-table tbody tr td[data-col="axis.attention.kind"]').allInnerTexts();
  assert.deepEqual(kinds, Array(6).fill('fpa'));
  await page.locator('text=clear filters').click();
  await page.waitForFunction(() => /1–12 of 12/.test(document.querySelector('#trials-info')?.textContent || ''));
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

test('the compare view shows only the config keys that differ, and both curves', async () => {
  await page.goBack();
  await page.locator('#trials-table tbody tr').nth(11).waitFor({timeout: 30000});
  assert.equal(await page.locator('#compare-selected').isDisabled(), true);
  // The first trial and one that differs from it in every axis.
  const {trials} = await apiGet('sweeps/web-dashboard/trials?limit=100&sort=id');
  const other = trials.find((t) => Object.keys(t.axes).every((k) => t.axes[k] !== trials[0].axes[k]));
  const ids = [trials[0].id, other.id];
  for (const id of ids) await page.locator(`#trials-table input.select-trial[data-trial="${id}"]`).check();
  await page.locator('#compare-selected').click();
  await page.waitForURL(new RegExp(`#/compare\\?trials=${[...ids].sort((a, b) => a - b).join(',')}$`));
  // The differing keys, computed here from the API's configs.
  const flat = (o, pre = '', out = {}) => {
    for (const [k, v] of Object.entries(o)) {
      if (v && typeof v === 'object' && !Array.isArray(v) && Object.keys(v).length) flat(v, `${pre}${k}.`, out);
      else out[pre + k] = JSON.stringify(v);
    }
    return out;
  };
  const configs = await Promise.all(ids.map(async (id) => flat((await apiGet(`trials/${id}`)).config)));
  const keys = [...new Set(configs.flatMap(Object.keys))];
  const differ = keys.filter((k) => configs[0][k] !== configs[1][k]).sort();
  for (const k of ['attention.kind', 'optimizer.p', 'seed']) assert.ok(differ.includes(k), `${k} does not differ`);
  await page.locator('#compare-diff tbody tr').first().waitFor({timeout: 15000});
  const shown = await page.locator('#compare-diff tbody tr').evaluateAll((rows) => rows.map((r) => r.dataset.key));
  assert.deepEqual(shown.sort(), differ);
  const same = keys.find((k) => k === 'model.d_model') || keys.find((k) => !differ.includes(k));
  assert.ok(!shown.includes(same), `identical key ${same} listed as a difference`);
  assert.equal(await page.locator(`#compare-same tr[data-key="${same}"]`).count(), 1);
  const row = page.locator(`#compare-diff tr[data-key="${differ[0]}"] td`);
  assert.deepEqual(await row.allInnerTexts(), configs.map((c) => c[differ[0]].replace(/^"(.*)"$/, '$1')));
  assert.equal(await page.locator('#compare-trials tbody tr').count(), 2);
  const n = await drawnCanvases('#compare-chart', 1, 300);
  assert.ok(n[0] > 300, `compare chart: ${n[0]} coloured pixels`);
  await page.locator('#compare-chart .u-over').hover();
  await page.waitForFunction(() => document.querySelectorAll('#compare-chart .chart-readout li').length === 2);
  await shot('compare');
  // The link reproduces the view.
  await page.reload();
  await page.locator('#compare-diff tbody tr').first().waitFor({timeout: 15000});
  assert.equal(await page.locator('#compare-diff tbody tr').count(), differ.length);
});

test('tags, note, build and archived are shown, as the CLI set them', async () => {
  const {trials} = await apiGet(`sweeps/web-dashboard/trials?limit=1&sort=id`);
  const id = trials[0].id;
  await cli('annotate', `trial:${id}`, '--tag', 'keep', '--tag', 'baseline', '--note', 'rerun after the fix');
  const api = await apiGet(`trials/${id}`);
  assert.deepEqual(api.tags, ['baseline', 'keep']);
  const build = api.attempts[0].build;
  assert.ok(build && build.version && build.numerics, `attempt 1 has no build: ${JSON.stringify(api.attempts[0])}`);
  await page.goto(`${base}/#/trials/${id}`);
  await page.locator('#trial-annotations .tag', {hasText: 'keep'}).waitFor({timeout: 15000});
  assert.equal(await page.locator('#trial-note').innerText(), 'rerun after the fix');
  const shownBuild = await page.locator('#trial-attempts td.build').first().innerText();
  assert.ok(shownBuild.startsWith(build.version) && shownBuild.includes(`numerics ${build.numerics}`),
            `build cell: ${shownBuild}`);
  await page.goto(`${base}/#/sweeps/web-dashboard`);
  await page.locator(`#trials-table tr[data-trial="${id}"] td[data-col=tags] .tag`, {hasText: 'keep'}).waitFor({timeout: 15000});

  // Archived: hidden from the list, shown with a badge when asked, restored by the CLI.
  await cli('archive', 'web-dashboard');
  await page.goto(`${base}/#/`);
  await page.locator('#archived-hidden', {hasText: /1 archived hidden/}).waitFor({timeout: 15000});
  assert.equal(await page.locator('#sweeps-table a', {hasText: 'web-dashboard'}).count(), 0);
  await page.locator('#show-archived').check();
  await page.locator('#sweeps-table tr', {hasText: 'web-dashboard'}).locator('.badge.archived').waitFor({timeout: 15000});
  await cli('archive', 'web-dashboard', '--restore');
  await page.locator('#show-archived').uncheck();
  await page.reload();
  await page.locator('#sweeps-table a', {hasText: 'web-dashboard'}).waitFor({timeout: 15000});
});

test('early stopping: stopped trials, every judgment, and the trial page say why', async () => {
  // Four learning rates x 2 seeds, the two hopeless ones last: the median rule stops them at
  // their first check (the CPU e2e test's sweep).
  const es = path.join(dir, 'es.yaml');
  fs.writeFileSync(es, `name: web-es
base:
  data:      {corpus: brown, val_fraction: 0.05, eval_batches: 2}
  model:     {seq_len: 64, layers: 2, d_model: 64, heads: 4}
  attention: {kind: fpa}
  optimizer: {kind: adamw, lr_vector: 0.003}
  train:     {steps: 100, tokens_per_step: 1024, micro_batch: 16, warmup: 10, eval_every: 20,
              diagnostics_every: 0, checkpoint_every: 20, threads: 1}
  device: cpu
grid: {optimizer.lr: [0.01, 0.003, 0.00001, 0.000001]}
seeds: [0, 1]
order: grid
resources: {gpus: 0}
early_stop: {rule: median, grace_steps: 20, interval: 20, min_configs: 2}
`);
  await cli('submit', es);
  await cli('watch', 'web-es');
  const {decisions} = await apiGet('sweeps/web-es/decisions');
  const stops = decisions.filter((d) => d.decision === 'stop');
  assert.deepEqual(stops.map((d) => d.config), ['optimizer.lr=1e-05', 'optimizer.lr=1e-06']);
  await page.goto(`${base}/#/sweeps/web-es`);
  // The header counts the stopped trials; the judgments table lists every judgment of the API.
  await page.locator('.chip.state-stopped', {hasText: '4 stopped'}).first().waitFor({timeout: 15000});
  await page.locator('#decisions tbody tr').first().waitFor({timeout: 15000});
  assert.equal(await page.locator('#decisions tbody tr').count(), decisions.length);
  assert.equal(await page.locator('#decisions tbody tr[data-decision=stop]').count(), 2);
  const row = page.locator('#decisions tbody tr[data-decision=stop]').first();
  assert.equal(await row.getAttribute('data-config'), 'optimizer.lr=1e-05');
  const threshold = await row.locator('td').nth(6).innerText();
  assert.equal(Number(threshold), Number(stops[0].threshold.toFixed(4)), `threshold cell ${threshold}`);
  // A stopped trial's page shows its configuration's judgments.
  const stopped = stops[0].trial_ids[0];
  await page.goto(`${base}/#/trials/${stopped}`);
  await page.locator('#trial-decisions tr[data-decision=stop]').waitFor({timeout: 15000});
  await page.screenshot({path: path.join(artifacts, 'dashboard-early-stop.png'), fullPage: true});
});

test('no script errors', () => {
  assert.deepEqual(pageErrors, []);
});
