// npm run bench [-- --quick]: measures scenarios against baselines run in the same process and
// minute, prints a table and writes bench/results.json. Nothing here is asserted.
import { execFile, spawnSync } from 'node:child_process';
import { promisify } from 'node:util';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { imageInfo, loadConfig } from '@shellbase/server';
import { startTestServer } from '../test/harness.ts';
import { SBX } from '../packages/server/src/util/native.ts';

interface Row { scenario: string; metric: string; value: number; unit: string; n: number; baseline?: string; ratio?: number }

const execFileAsync = promisify(execFile);
const quick = process.argv.includes('--quick');
const N = quick ? 20 : 100;
const rows: Row[] = [];

function pct(samples: number[], p: number): number {
  const s = [...samples].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
}

async function time(n: number, fn: () => unknown): Promise<number[]> {
  const out: number[] = [];
  await fn(); // warm-up
  for (let i = 0; i < n; i++) { const t0 = performance.now(); await fn(); out.push(performance.now() - t0); }
  return out;
}

function record(scenario: string, samples: number[], baseline?: { name: string; p50: number }) {
  for (const p of [50, 90, 99]) {
    const value = Number(pct(samples, p).toFixed(2));
    const row: Row = { scenario, metric: `p${p}`, value, unit: 'ms', n: samples.length };
    if (baseline && p === 50) { row.baseline = baseline.name; row.ratio = Number((value / baseline.p50).toFixed(2)); }
    rows.push(row);
  }
}

const t = await startTestServer({ storeSizeGb: 16 });
const scratch = mkdtempSync(path.join(tmpdir(), 'shellbase-bench-'));
try {
  const rootfs = imageInfo(loadConfig().cache, 'debian').rootfs;
  for (const d of ['up', 'work', 'merged']) mkdirSync(path.join(scratch, d));
  const forkExec = await time(N, () => spawnSync('/bin/true'));
  const bareBwrap = await time(N, () => spawnSync(SBX, ['run', '--chdir', scratch, '--lower', rootfs, '--upper', 'up',
    '--work', 'work', '--merged', 'merged', '--', 'bwrap', '--unshare-all', '--die-with-parent', '--bind',
    path.join(scratch, 'merged'), '/', '--proc', '/proc', '--dev', '/dev', '--', '/bin/true']));
  record('baseline: fork+exec /bin/true', forkExec);
  const bwrapP50 = pct(bareBwrap, 50);
  record('baseline: bare bwrap true over the same overlay', bareBwrap);
  const ctx = t.sb.context('bench');
  // Warm up: fill the scratch and cgroup pools and the page cache before anything is timed.
  for (let w = 0; w < 30; w++) await ctx.exec('true');
  // The server shares this process, so the client must not block it: an async child process.
  const httpClient = async (body: unknown, url = `${t.server.url}/v1/contexts/bench/exec`) => JSON.parse((await execFileAsync(process.execPath,
    ['bench/http-client.mjs', url, t.key, String(N), ...(body === undefined ? [] : [JSON.stringify(body)])], { encoding: 'utf8' })).stdout) as number[];
  const httpTrue = await httpClient({ command: 'true' });
  record('query true via HTTP (client in its own process), sequential', httpTrue, { name: 'bare bwrap', p50: bwrapP50 });
  record('query argv [true] via HTTP (client in its own process)', await httpClient({ argv: ['true'] }), { name: 'bare bwrap', p50: bwrapP50 });
  record('query true via SDK, sequential', await time(N, () => ctx.exec('true')), { name: 'bare bwrap', p50: bwrapP50 });
  record('query argv [true] via SDK, sequential', await time(N, () => ctx.exec(['true'])), { name: 'bare bwrap', p50: bwrapP50 });
  // A long history against a new context (squashing keeps the layer chain short).
  const versions = quick ? 200 : 1000;
  const long = t.sb.context('bench-long');
  for (let v = 0; v < versions; v++) await long.exec(['sh', '-c', `echo ${v} > /root/v${v % 50}`]);
  await t.server.engine.squasher.idle();
  const fresh = t.sb.context('bench-new');
  await fresh.exec(['true']);
  const freshSamples = await time(N, () => fresh.exec(['true']));
  record('query argv [true] on a context with 1 version', freshSamples);
  record(`query argv [true] on a context with ${versions} versions`, await time(N, () => long.exec(['true'])),
    { name: '1 version', p50: pct(freshSamples, 50) });
  record('query writing 1 MiB and 100 files', await time(Math.ceil(N / 4), () =>
    ctx.exec('head -c 1M /dev/urandom > /root/blob; for i in $(seq 100); do echo $i > /root/f$i; done')));
  // Files without a sandbox against the same read as a query.
  await ctx.exec('head -c 4096 /dev/urandom > /root/4k');
  const catQuery = await httpClient({ argv: ['cat', '/root/4k'], commit: 'never' });
  record('read a 4 KiB file via the files API (HTTP)', await httpClient(undefined, `${t.server.url}/v1/contexts/bench/files/root/4k`),
    { name: 'cat as a query', p50: pct(catQuery, 50) });
  record('read a 4 KiB file with cat as a query (HTTP)', catQuery);
  const v1 = (await ctx.exec('echo one > /root/diff-me')).version;
  const v2 = (await ctx.exec('echo two > /root/diff-me')).version;
  record('diff of two versions 1 file apart (debian image)', await time(N, () => ctx.diff({ from: v1, to: v2 })));
  let i = 0;
  record('fork of a context', await time(N, () => ctx.fork(`bench-fork-${i++}`)));
} finally {
  await t.close();
  rmSync(scratch, { recursive: true, force: true });
}

console.log('\nscenario'.padEnd(52), 'metric', 'value'.padStart(10), '  n  ratio');
for (const r of rows) {
  console.log(r.scenario.padEnd(51), r.metric.padEnd(6), `${r.value} ${r.unit}`.padStart(10), String(r.n).padStart(3),
    r.ratio === undefined ? '' : ` ${r.ratio}× ${r.baseline}`);
}
writeFileSync('bench/results.json', JSON.stringify(rows, null, 2) + '\n');
