// npm run bench:ab -- A B [--passes N] [--queries N] [--creates N] [--max-ratio R] [--out FILE]
// Two commits measured in one run: each checked out and built in a worktree of its own, each
// served by its own server (own data directory, loopback ports), and the hot paths timed on both
// in alternating passes, so that the host's drift hits both alike: query `true` via HTTP (a client
// in its own process) and a machine create from the warmed debian template (ready VMs off: each
// create restores the template), with its first exec. Prints each figure's p50 for A and for B,
// B/A, and the median of the passes' own B/A, and writes them with every pass's p50 to
// bench/ab-results.json (or --out). A B/A above --max-ratio (default 1.05) is reported, not failed
// on: the exit code is 0 unless the run itself failed.
import { rmdirSync, writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { checkout, serve, type AbServer, type Checkout, type Undo } from './ab-checkout.ts';
import { httpClient, pct, round } from './lib.ts';

const USAGE = 'usage: npm run bench:ab -- A B [--passes N] [--queries N] [--creates N] [--max-ratio R] [--out FILE]';
const repo = fileURLToPath(new URL('..', import.meta.url));
process.chdir(repo); // lib.ts's client is bench/http-client.mjs, from here

const args = process.argv.slice(2);
const option = (name: string, fallback: string): string => {
  const at = args.indexOf(`--${name}`);
  return at >= 0 ? args.splice(at, 2)[1] ?? '' : fallback;
};
const count = (name: string, fallback: number): number => {
  const v = Number(option(name, String(fallback)));
  if (!Number.isInteger(v) || v < 1) { console.error(`--${name} takes a whole number, 1 or more\n${USAGE}`); process.exit(2); }
  return v;
};
const passes = count('passes', 10);
const queries = count('queries', 100);
const creates = count('creates', 3);
const maxRatio = Number(option('max-ratio', '1.05'));
const out = path.resolve(option('out', 'bench/ab-results.json'));
const revs = args.filter((a) => !a.startsWith('--'));
if (revs.length !== 2 || revs.length !== args.length || !(maxRatio > 0)) { console.error(USAGE); process.exit(2); }

/** One side of the comparison: a commit, its server, and its samples per figure, pass by pass. */
interface Side { label: 'A' | 'B'; rev: string; co?: Checkout; s?: AbServer; samples: Record<Figure, number[][]> }
type Figure = 'query' | 'create' | 'answered';
const FIGURES: Record<Figure, string> = {
  query: 'query `true` via HTTP (client in its own process)',
  create: 'machine create from the template, until exec can run',
  answered: 'machine create, then a first exec (`true`) answered',
};
const sides: Side[] = (['A', 'B'] as const).map((label, i) => ({ label, rev: revs[i], samples: { query: [], create: [], answered: [] } }));

// Everything started is undone in reverse, once, also on Ctrl-C or SIGTERM.
const undo: Undo = [];
let undoing: Promise<void> | undefined;
const cleanUp = () => (undoing ??= (async () => {
  for (const f of undo.reverse()) await f().catch((e: unknown) => console.error('ab: clean-up failed:', e));
})());
const started = performance.now();
const say = (msg: string) => console.error(`ab: ${msg} (${Math.round((performance.now() - started) / 1000)} s)`);
for (const sig of ['SIGINT', 'SIGTERM'] as const) {
  process.once(sig, () => { say(`${sig}: cleaning up`); void cleanUp().then(() => process.exit(130)); });
}

/** An API call with the server's admin key; a failure stops the run. */
async function api<T>(s: AbServer, method: string, url: string, body?: unknown): Promise<T> {
  const res = await fetch(`${s.url}${url}`, {
    method, headers: { authorization: `Bearer ${s.key}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`${method} ${url}: HTTP ${res.status} ${text}`);
  return (text ? JSON.parse(text) : undefined) as T;
}

/** A machine created, a first exec run in it, and the machine deleted: the create call's time and the time to the exec's answer. */
async function createMachine(s: AbServer): Promise<{ create: number; answered: number }> {
  const t0 = performance.now();
  const { id } = await api<{ id: string }>(s, 'POST', '/v1/machines', {});
  const create = performance.now() - t0;
  try {
    const r = await api<{ exitCode: number }>(s, 'POST', `/v1/machines/${id}/exec`, { command: 'true' });
    if (r.exitCode !== 0) throw new Error(`true exited ${r.exitCode} in machine ${id}`);
    return { create, answered: performance.now() - t0 };
  } finally {
    await api(s, 'DELETE', `/v1/machines/${id}`);
  }
}

const queryUrl = (s: AbServer) => `${s.url}/v1/contexts/ab/exec`;

async function main(): Promise<void> {
  const under = path.join(process.env.SHELLBASE_CACHE || '/var/cache/shellbase', 'ab');
  undo.push(async () => { try { rmdirSync(under); } catch { /* not there, or another run's worktrees in it */ } });
  for (const side of sides) {
    say(`${side.label}: checking out and building ${side.rev}`);
    side.co = await checkout(repo, side.rev, under, side.label.toLowerCase(), undo);
  }
  for (const side of sides) {
    say(`${side.label}: starting its server`);
    side.s = await serve(side.co!, side.label.toLowerCase(), { SHELLBASE_MACHINES_READY: '0', SHELLBASE_STORE_SIZE_GB: '16' }, undo);
  }
  // Warm-up, one side after the other: the warm pool, the page cache, the machine template (built
  // on first use into the shared cache if this commit has none yet: ~40 s under TCG).
  for (const side of sides) {
    say(`${side.label}: warming up (queries, the machine template)`);
    for (let i = 0; i < 30; i++) await api(side.s!, 'POST', '/v1/contexts/ab/exec', { command: 'true' });
    await createMachine(side.s!);
  }
  for (let r = 0; r < passes; r++) {
    // A then B in even passes, B then A in odd ones: neither always goes first.
    const order = r % 2 === 0 ? sides : [...sides].reverse();
    say(`pass ${r + 1}/${passes} (${order.map((x) => x.label).join(', ')}); load ${loadavg()[0].toFixed(2)}`);
    for (const side of order) side.samples.query.push(await httpClient({ t: side.s!, n: queries }, queryUrl(side.s!), { command: 'true' }));
    for (const side of order) {
      const made = { create: [] as number[], answered: [] as number[] };
      for (let i = 0; i < creates; i++) {
        const m = await createMachine(side.s!);
        made.create.push(m.create);
        made.answered.push(m.answered);
      }
      side.samples.create.push(made.create);
      side.samples.answered.push(made.answered);
    }
  }
}

const load = { start: loadavg().map(round), end: [] as number[] };
try {
  await main();
} catch (e) {
  console.error('ab: the run failed:', e);
  process.exitCode = 1;
} finally {
  await cleanUp();
}
if (process.exitCode) process.exit();
load.end = loadavg().map(round);

const [a, b] = sides;
const rows = (Object.keys(FIGURES) as Figure[]).map((f) => {
  const [pa, pb] = [pct(a.samples[f].flat(), 50), pct(b.samples[f].flat(), 50)];
  const ratio = round(pb / pa);
  const [passesA, passesB] = [a, b].map((x) => x.samples[f].map((s) => round(pct(s, 50))));
  // Each pass's B/A: their median shrugs off a pass the host disturbed for one side only.
  const passRatio = round(pct(passesA.map((v, i) => passesB[i] / v), 50));
  return { metric: FIGURES[f], unit: 'ms', n: a.samples[f].flat().length, a: round(pa), b: round(pb), ratio, passRatio, within: ratio <= maxRatio, passesA, passesB };
});
const w = Math.max(...rows.map((r) => r.metric.length));
console.log(`\nA ${a.co!.commit.slice(0, 12)} ${a.co!.subject}\nB ${b.co!.commit.slice(0, 12)} ${b.co!.subject}`);
console.log(`${passes} passes, alternating; load ${load.start.join(' ')} → ${load.end.join(' ')}\n`);
console.log(`${'metric'.padEnd(w)}  ${'A p50'.padStart(11)}  ${'B p50'.padStart(11)}    B/A  passes' B/A  n (each)`);
for (const r of rows) {
  const flag = r.within ? '' : `  above ${maxRatio}×`;
  console.log(`${r.metric.padEnd(w)}  ${`${r.a} ms`.padStart(11)}  ${`${r.b} ms`.padStart(11)}  ${`${r.ratio.toFixed(2)}×`.padStart(5)}  ${`${r.passRatio.toFixed(2)}×`.padStart(11)}  ${String(r.n).padStart(8)}${flag}`);
}
const side = (x: Side) => ({ rev: x.rev, commit: x.co!.commit, subject: x.co!.subject });
writeFileSync(out, JSON.stringify({
  date: new Date().toISOString(), a: side(a), b: side(b), passes, queriesPerPass: queries, createsPerPass: creates, maxRatio, load, rows,
}, null, 2) + '\n');
console.error(`ab: done in ${Math.round((performance.now() - started) / 1000)} s; ${out} written`);
