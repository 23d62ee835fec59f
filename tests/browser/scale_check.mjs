// Manual check of the dashboard at scale (not a ctest: it takes a minute and its timings depend on
// the machine). Fills a store with ablate-http-bench (10,000 trials x 1,000 loss points, all
// succeeded), serves it with the real ablated, and times the sweep page in headless Chromium:
// first table, curves, ablation table, sort, next page, axis filter, 1,000-row page.
//
//   node tests/browser/scale_check.mjs --bench build/server/http/ablate-http-bench \
//        --ablated build/bin/ablated --source-dir . [--trials 10000] [--points 1000] [--out DIR]
// Prints the timings and the dashboard URL; screenshot: OUT/dashboard-scale.png. With --serve it
// keeps ablated running for a look by hand (Ctrl-C stops it).
import {spawn, execFileSync} from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {parseArgs} from 'node:util';
import {fileURLToPath} from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const {values: opt} = parseArgs({options: {
  bench: {type: 'string'}, ablated: {type: 'string'}, 'source-dir': {type: 'string'},
  trials: {type: 'string', default: '10000'}, points: {type: 'string', default: '1000'},
  out: {type: 'string'}, serve: {type: 'boolean', default: false},
}});
if (!opt.bench || !opt.ablated || !opt['source-dir']) {
  console.error('usage: scale_check.mjs --bench BIN --ablated BIN --source-dir DIR [--trials N] [--points N] [--out DIR] [--serve]');
  process.exit(2);
}
const {chromium} = await import(path.join(here, 'node_modules/playwright-core/index.mjs'));
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ablate_web_scale_'));
const out = path.resolve(opt.out || path.join(os.tmpdir(), 'ablate-web-scale'));

console.log(`filling ${dir} with ${opt.trials} trials x ${opt.points} points…`);
execFileSync(opt.bench, ['--trials', opt.trials, '--points', opt.points, '--iters', '1', '--dir', dir],
    {stdio: 'inherit'});
const log = fs.openSync(path.join(dir, 'ablated.log'), 'a');
const ablated = spawn(opt.ablated, ['--data-dir', dir, '--grpc', '127.0.0.1:0', '--http', '127.0.0.1:0',
  '--web-dir', path.join(path.resolve(opt['source-dir']), 'web')], {stdio: ['ignore', log, log]});
process.on('exit', () => ablated.kill('SIGTERM'));
process.on('SIGINT', () => process.exit(130));
const httpFile = path.join(dir, 'ablated.http');
for (let i = 0; i < 200 && !(fs.existsSync(httpFile) && fs.readFileSync(httpFile, 'utf8').trim()); i++) {
  await new Promise((r) => setTimeout(r, 100));
}
const base = `http://${fs.readFileSync(httpFile, 'utf8').trim()}`;
const token = fs.readFileSync(path.join(dir, 'token'), 'utf8').trim();
console.log(`dashboard: ${base}/#token=${token}`);

const browser = await chromium.launch({executablePath: '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync']});
const page = await browser.newPage({viewport: {width: 1280, height: 800}});
page.on('pageerror', (e) => console.log('page error:', e.message));
await page.goto(`${base}/#token=${token}`);
await page.locator('#sweeps-table').waitFor();
const time = async (label, fn) => {
  const t0 = Date.now();
  await fn();
  console.log(`${label.padEnd(34)} ${String(Date.now() - t0).padStart(6)} ms`);
};
const text = (sel, re) => page.waitForFunction(([s, r]) => new RegExp(r).test(document.querySelector(s)?.textContent || ''),
    [sel, re], {timeout: 60000});
await time('sweep page: trial table', async () => {
  await page.goto(`${base}/#/sweeps/1`);
  await page.locator('#trials-table').waitFor();
});
await time('  + curves (32 series)', () => text('#curves-note', 'curves'));
await time('  + ablation table', () => page.locator('#results td.result').first().waitFor());
await time('sort by loss', async () => {
  await page.locator('#sort-loss').click();
  await page.waitForFunction(() => document.querySelector('th[aria-sort] #sort-loss'));
});
await time('next page', async () => {
  await page.locator('#page-next').click();
  await text('#trials-info', '^101–200');
});
await time('filter attention.kind=sagebwd', async () => {
  await page.locator('select[data-axis="attention.kind"]').selectOption('sagebwd');
  await text('#trials-info', 'of 5,000');
});
await time('1,000-row page', async () => {
  await page.locator('#page-size').selectOption('1000');
  await page.waitForFunction(() => document.querySelectorAll('#trials-table tbody tr').length === 1000);
});
await time('trial page (all curves)', async () => {
  await page.goto(`${base}/#/trials/1`);
  await page.locator('#trial-curves canvas').first().waitFor();
});
fs.mkdirSync(out, {recursive: true});
await page.goto(`${base}/#/sweeps/1`);
await page.locator('#curves-chart canvas').waitFor();
await page.screenshot({path: path.join(out, 'dashboard-scale.png')});
console.log(`screenshot: ${path.join(out, 'dashboard-scale.png')}`);
await browser.close();
if (opt.serve) {
  console.log('serving; Ctrl-C stops ablated');
  await new Promise(() => {});
}
ablated.kill('SIGTERM');
await new Promise((r) => ablated.on('exit', r));
fs.rmSync(dir, {recursive: true, force: true});
