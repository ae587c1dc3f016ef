// The dashboard and a report in a real browser (Debian's Chromium, driven
// by playwright-core from server/web/node_modules): ktuned replays a
// recording while a job runs; the page must list the job, its convergence
// chart must have a point per evaluation, and the page must follow the job
// as candidates are stored. The same checks on `ktune report`'s file,
// opened from disk. Screenshots go to --out.
//
//   node tests/web/dashboard_test.mjs --ktuned PATH --ktune PATH --out DIR
//        [--chromium /usr/bin/chromium]
import { spawn, execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const source = path.resolve(here, '../..');
const require = createRequire(path.join(source, 'server/web/package.json'));
const { chromium } = require('playwright-core');

const args = Object.fromEntries(process.argv.slice(2).reduce((pairs, a, i, all) => {
  if (a.startsWith('--')) pairs.push([a.slice(2), all[i + 1]]);
  return pairs;
}, []));
for (const need of ['ktuned', 'ktune', 'out']) {
  if (!args[need]) throw new Error('give --' + need);
}
const chromiumPath = args.chromium || '/usr/bin/chromium';
fs.mkdirSync(args.out, { recursive: true });
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ktune-web-'));
const recording = path.join(source, 'kernels/recorded/convolution_milo_A100.json.gz');
const kEvals = 40;

let failures = 0;
function check(ok, what, detail) {
  console.log((ok ? 'ok   ' : 'FAIL ') + what + (detail === undefined ? '' : ': ' + detail));
  if (!ok) failures++;
}

async function waitFor(what, f, seconds = 60) {
  const end = Date.now() + seconds * 1000;
  for (;;) {
    const v = await f();
    if (v) return v;
    if (Date.now() > end) throw new Error('timed out waiting for ' + what);
    await new Promise((r) => setTimeout(r, 100));
  }
}

function readWhenWritten(file) {
  return waitFor(file, () => (fs.existsSync(file) && fs.readFileSync(file, 'utf8').trim()) || null, 30);
}

const launchOptions = {
  executablePath: chromiumPath,
  headless: true,
  // As root in CI, without a network: no sandbox, nothing in the background.
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
};

const daemon = spawn(args.ktuned, [
  '--device', 'sim:' + recording, '--db', path.join(tmp, 'k.db'),
  '--listen', '127.0.0.1:0', '--port-file', path.join(tmp, 'grpc'),
  '--http', '127.0.0.1:0', '--http-port-file', path.join(tmp, 'http'),
  // Slow enough to watch: a candidate every few hundred milliseconds.
  '--sim-speed', '10'], { stdio: ['ignore', 'ignore', fs.openSync(path.join(tmp, 'daemon.err'), 'w')] });
let browser = null;
try {
  const grpc = await readWhenWritten(path.join(tmp, 'grpc'));
  const http = await readWhenWritten(path.join(tmp, 'http'));
  const base = 'http://' + http;
  const submitted = execFileSync(args.ktune, ['--server', grpc, 'tune', '--max-evals', String(kEvals), '--seed', '3', '--json'],
    { encoding: 'utf8' });
  const id = JSON.parse(submitted).job_id;
  check(Boolean(id), 'a job was queued', id);

  browser = await chromium.launch(launchOptions);
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });

  // The jobs page lists it.
  await page.goto(base + '/');
  await page.waitForSelector(`tr[data-job-id="${id}"]`, { timeout: 30000 });
  const row = await page.textContent(`tr[data-job-id="${id}"]`);
  check(row.includes('convolution_kernel'), "the job's row names its kernel", row.trim().slice(0, 80));
  await page.screenshot({ path: path.join(args.out, 'dashboard-jobs.png') });

  // Its page: the convergence chart has a point per evaluation, and grows
  // as the next candidates are stored.
  await page.goto(base + '/jobs/' + id);
  await page.waitForFunction(() => window.ktune && window.ktune.charts.convergence &&
    window.ktune.charts.convergence.data.datasets[0].data.length > 0, null, { timeout: 30000 });
  const points = () => page.evaluate(() => window.ktune.charts.convergence.data.datasets[0].data.length);
  const shown = () => page.evaluate(() => Number(document.body.dataset.evaluations));
  const rows = () => page.evaluate(() => document.querySelectorAll('#measurements tr').length);
  const first = await points();
  check(first === await shown(), 'the convergence chart has a point per evaluation shown', first);
  check(first === await rows(), 'and the table a row per evaluation', await rows());
  const state = await page.evaluate(() => document.body.dataset.jobState);
  check(state === 'RUNNING' || state === 'QUEUED', 'the job is still running while watched', state);
  const grown = await waitFor('the page to show the next candidate', async () => ((await points()) > first ? points() : null), 60);
  check(grown > first, 'the page updated when the next candidate was stored', first + ' -> ' + grown);
  await page.screenshot({ path: path.join(args.out, 'dashboard-job.png'), fullPage: true });

  // To its end: the chart holds exactly the job's evaluations.
  await page.waitForFunction(() => document.body.dataset.jobState === 'SUCCEEDED', null, { timeout: 120000 });
  await page.waitForTimeout(300);
  const api = await (await fetch(base + '/api/jobs/' + id)).json();
  const evaluations = Number(api.progress.evaluations);
  check(evaluations === kEvals, 'the job ran its budget', evaluations);
  check(await points() === evaluations, 'the finished chart has as many points as evaluations', await points());
  const paramCharts = await page.evaluate(() => Object.keys(window.ktune.charts).filter((k) => k.startsWith('param:')).length);
  check(paramCharts === api.measurements[0].config.names.length, 'a chart per parameter', paramCharts);
  await page.screenshot({ path: path.join(args.out, 'dashboard-job-done.png'), fullPage: true });

  await page.goto(base + '/devices');
  await page.waitForSelector('tr[data-device]', { timeout: 30000 });
  const device = await page.textContent('tr[data-device]');
  check(device.includes('A100'), 'the devices page lists the replayed GPU', device.trim().slice(0, 60));
  check(errors.length === 0, 'no script errors on the live pages', errors.join(' | '));

  // The report: the same page from one file, with no daemon to ask.
  const report = path.join(args.out, 'report.html');
  execFileSync(args.ktune, ['report', id, '--db', path.join(tmp, 'k.db'), '--html', report], { stdio: 'inherit' });
  daemon.kill('SIGTERM');
  const offline = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  const reportErrors = [];
  offline.on('pageerror', (e) => reportErrors.push(String(e)));
  offline.on('requestfailed', (r) => reportErrors.push('request ' + r.url()));
  await offline.goto('file://' + report);
  await offline.waitForFunction(() => document.body.dataset.ready === 'true', null, { timeout: 30000 });
  const reportPoints = await offline.evaluate(() => window.ktune.charts.convergence.data.datasets[0].data.length);
  check(reportPoints === evaluations, "the report's convergence chart has as many points as evaluations", reportPoints);
  const reportRows = await offline.evaluate(() => document.querySelectorAll('#measurements tr').length);
  check(reportRows === evaluations, "the report's table has every measurement", reportRows);
  check(reportErrors.length === 0, 'the report loads nothing and has no script errors', reportErrors.join(' | '));
  await offline.screenshot({ path: path.join(args.out, 'report.png'), fullPage: true });

  // ktune evaluate --html: the strategies' curves beside random search's.
  const evaluation = path.join(args.out, 'evaluate.html');
  execFileSync(args.ktune, ['evaluate', '--device', 'sim:' + path.join(source, 'kernels/recorded/pnpoly_kttvalues_RTX_2080_Ti.json.gz'),
    '--strategy', 'auto,random', '--repeats', '3', '--html', evaluation], { stdio: ['ignore', 'ignore', 'inherit'] });
  const compared = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  const comparedErrors = [];
  compared.on('pageerror', (e) => comparedErrors.push(String(e)));
  await compared.goto('file://' + evaluation);
  await compared.waitForFunction(() => document.body.dataset.ready === 'true', null, { timeout: 30000 });
  const curves = await compared.evaluate(() => window.ktune.charts.space0.data.datasets.map((d) => d.label + ':' + d.data.length));
  check(curves.length === 4 && curves[0].startsWith('auto:') && curves[2].startsWith('random search:'),
    'the comparison draws each strategy, random search and the optimum', curves.join(' '));
  check(comparedErrors.length === 0, 'the comparison has no script errors', comparedErrors.join(' | '));
  await compared.screenshot({ path: path.join(args.out, 'evaluate.png'), fullPage: true });

  // ktune evaluate --max-seconds --html: final times and curves against
  // recorded seconds.
  const timed = path.join(args.out, 'evaluate_time.html');
  execFileSync(args.ktune, ['evaluate', '--device', 'sim:' + path.join(source, 'kernels/recorded/sgemm_large_H200.json.gz'),
    '--strategy', 'genetic,random', '--repeats', '3', '--max-seconds', '30', '--html', timed], { stdio: ['ignore', 'ignore', 'inherit'] });
  const timedPage = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  const timedErrors = [];
  timedPage.on('pageerror', (e) => timedErrors.push(String(e)));
  await timedPage.goto('file://' + timed);
  await timedPage.waitForFunction(() => document.body.dataset.ready === 'true', null, { timeout: 30000 });
  const timeCurves = await timedPage.evaluate(() => window.ktune.charts.space0.data.datasets.map((d) => d.label + ':' + d.data.length));
  check(timeCurves.join(' ') === 'genetic:201 random:201 optimum:2',
    'the timed comparison draws each strategy against recorded seconds and the optimum', timeCurves.join(' '));
  const axis = await timedPage.evaluate(() => window.ktune.charts.space0.options.scales.x.title.text);
  check(axis.startsWith('recorded seconds'), 'its axis is recorded time', axis);
  const cells = await timedPage.evaluate(() => document.querySelectorAll('tbody td').length);
  check(cells === 3, 'its table gives the space and each strategy\'s final times', cells);
  check(timedErrors.length === 0, 'the timed comparison has no script errors', timedErrors.join(' | '));
  await timedPage.screenshot({ path: path.join(args.out, 'evaluate_time.png'), fullPage: true });
} catch (e) {
  check(false, 'the test ran to its end', e.stack || e);
  try { console.log(fs.readFileSync(path.join(tmp, 'daemon.err'), 'utf8')); } catch (_) { /* none */ }
} finally {
  if (browser) await browser.close();
  daemon.kill('SIGKILL');
  fs.rmSync(tmp, { recursive: true, force: true });
}
console.log(failures === 0 ? 'all checks passed' : failures + ' check(s) failed');
process.exit(failures === 0 ? 0 : 1);
