import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import type { Shellbase } from '@shellbase/sdk';
import { spawnServer } from '../../test/harness.ts';
import { latency, time, value, type Bench } from '../lib.ts';

const DAY_S = 86_400;

/** A server of its own (its own process: its memory and event loop are its own), and what it took to start. */
export async function serve(home: string): Promise<{ child: ChildProcess; sb: Shellbase; startMs: number }> {
  const t0 = performance.now();
  const s = await spawnServer(home, { env: { SHELLBASE_GC_INTERVAL_MS: '3600000' } });
  await s.sb.contexts.list();
  return { ...s, startMs: performance.now() - t0 };
}

export async function stop(child: ChildProcess): Promise<void> {
  const done = new Promise((r) => child.once('exit', r));
  child.kill('SIGTERM');
  await done;
}

const rssMb = (pid: number) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) / 1024;
const dbBytes = (home: string) => ['meta.db', 'meta.db-wal'].reduce((n, f) => { try { return n + statSync(path.join(home, f)).size; } catch { return n; } }, 0);
/** The database file itself (the WAL is a fixed-size ring once checkpoints keep up). */
const mainBytes = (home: string) => statSync(path.join(home, 'meta.db')).size;

/**
 * `contexts` × `perContext` versions (one layer each over the image, as after squashes), their
 * layer rows and references, and a usage row per two versions, written straight into the
 * metadata database of a stopped server, spread over the last 40 days (a quarter past the
 * 30-day retention), as months of a busy server leave them.
 */
export function fill(home: string, contexts: number, perContext: number): void {
  const db = new Database(path.join(home, 'meta.db'));
  const img = db.prepare("SELECT id, layers FROM versions WHERE tenant_id = '' LIMIT 1").get() as { id: string; layers: string };
  const imageLayer = (JSON.parse(img.layers) as string[])[0];
  const total = contexts * perContext;
  const t0 = Date.now() / 1000 - 40 * DAY_S;
  const step = (40 * DAY_S - 3600) / total;
  const at = (expr: string) => `strftime('%Y-%m-%dT%H:%M:%fZ', ${t0} + (${expr}) * ${step}, 'unixepoch')`;
  db.transaction(() => {
    db.exec(`
      CREATE TEMP TABLE c(i INTEGER PRIMARY KEY); CREATE TEMP TABLE k(j INTEGER PRIMARY KEY);
      WITH RECURSIVE s(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM s WHERE n + 1 < ${contexts}) INSERT INTO c SELECT n FROM s;
      WITH RECURSIVE s(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM s WHERE n + 1 < ${perContext}) INSERT INTO k SELECT n FROM s;
      INSERT INTO layers (id, kind, bytes, created_at, refs)
        SELECT 'lb_' || i || '_' || j, 'exec', 100, ${at(`j * ${contexts} + i`)}, 1 FROM c, k;
      INSERT INTO versions (id, tenant_id, parent, merged, context, depth, layers, changes, cause, bytes, created_at, detached)
        SELECT 'vb_' || i || '_' || j, 't_admin', CASE WHEN j = 0 THEN '${img.id}' ELSE 'vb_' || i || '_' || (j - 1) END, NULL, 'bulk-' || i, j + 1,
          '["${imageLayer}","lb_' || i || '_' || j || '"]', '[["/root/f","f"]]', '{"kind":"exec","command":"bulk"}', 100, ${at(`j * ${contexts} + i`)}, 0
        FROM c, k;
      INSERT INTO contexts (tenant_id, name, head, image, created_at, updated_at)
        SELECT 't_admin', 'bulk-' || i, 'vb_' || i || '_' || ${perContext - 1}, 'debian', ${at('0')}, ${at(`${total - 1}`)} FROM c;
      INSERT INTO layer_refs (tenant_id, layer_id, refs) SELECT 't_admin', 'lb_' || i || '_' || j, 1 FROM c, k;
      INSERT INTO layer_refs (tenant_id, layer_id, refs) VALUES ('t_admin', '${imageLayer}', ${total})
        ON CONFLICT (tenant_id, layer_id) DO UPDATE SET refs = layer_refs.refs + excluded.refs;
      UPDATE layers SET refs = refs + ${total} WHERE id = '${imageLayer}';
      UPDATE tenants SET stored_bytes = stored_bytes + ${total * 100} WHERE id = 't_admin';
      INSERT INTO usage (tenant_id, context, kind, created_at, cpu_ms, wall_ms, memory_peak_bytes, bytes_written, exit_code)
        SELECT 't_admin', 'bulk-' || i, 'query', ${at(`j * ${contexts} + i`)}, 3, 9, 1048576, 100, 0 FROM c, k WHERE j % 2 = 0;
    `);
  })();
  db.close();
}

/** Each measurement over one server: query, commit, usage report, a collection pass, resident memory. */
async function measure(b: Bench, label: string, home: string, probeCommits: number) {
  const { child, sb, startMs } = await serve(home);
  try {
    value(b, `history at scale (${label})`, 'start-up until healthy', startMs, 'ms');
    const c = sb.context('probe');
    const query = latency(b, `history at scale (${label}): query argv [true]`, await time(b.n, () => c.exec(['true'])), label === 'empty store' ? undefined : 'empty store: query');
    if (label === 'empty store') b.baselines.set('empty store: query', query);
    let k = 0;
    const commits = await time(probeCommits, () => c.exec(['sh', '-c', `echo ${k++} > /root/f${k % 20}`]));
    const commit = latency(b, `history at scale (${label}): a committed write`, commits, label === 'empty store' ? undefined : 'empty store: commit');
    if (label === 'empty store') {
      b.baselines.set('empty store: commit', commit);
      // What a committed query leaves in the database file (its version, layer, references and usage row).
      await new Promise((r) => setTimeout(r, 1500)); // a checkpoint
      const db0 = mainBytes(home);
      for (let i = 0; i < 200; i++) await c.exec(['sh', '-c', `echo ${k++} > /root/g${i % 20}`]);
      await new Promise((r) => setTimeout(r, 1500));
      value(b, 'history at scale (empty store)', 'database growth per committed query', (mainBytes(home) - db0) / 200, 'bytes', 200);
    }
    const u0 = performance.now();
    await sb.usage({ groupBy: 'context' });
    value(b, `history at scale (${label})`, 'usage report by context', performance.now() - u0, 'ms');
    value(b, `history at scale (${label})`, 'server resident memory before the collection', rssMb(child.pid!), 'MB');
    // A collection pass, with /healthz asked every 5 ms meanwhile: the worst answer is what a stalled event loop would show.
    await fetch(`${sb.url}/metrics`); // resets the server's worst event-loop delay
    let worst = 0;
    let collecting = true;
    const pinger = (async () => {
      while (collecting) {
        const t0 = performance.now();
        await fetch(`${sb.url}/healthz`);
        worst = Math.max(worst, performance.now() - t0);
        await new Promise((r) => setTimeout(r, 5));
      }
    })();
    const gc = await sb.gc();
    collecting = false;
    await pinger;
    const metrics = await (await fetch(`${sb.url}/metrics`)).text();
    const lag = Number(/^shellbase_nodejs_eventloop_lag_max_seconds (\S+)$/m.exec(metrics)?.[1]) * 1000;
    // The part of it the server caused itself (not its thread waiting for a CPU).
    const stall = Number(/^shellbase_eventloop_stall_max_seconds (\S+)$/m.exec(metrics)?.[1]) * 1000;
    value(b, `history at scale (${label})`, 'collection pass', gc.ms, 'ms');
    value(b, `history at scale (${label})`, 'versions dropped by the pass', gc.versionsDropped, 'versions');
    value(b, `history at scale (${label})`, 'pass complete (1) or stopped at its budget (0)', gc.complete ? 1 : 0, '');
    value(b, `history at scale (${label})`, 'worst /healthz answer during the pass', worst, 'ms');
    value(b, `history at scale (${label})`, 'worst event-loop delay during the pass', lag, 'ms');
    value(b, `history at scale (${label})`, 'worst event-loop stall (the server\'s own) during the pass', stall, 'ms');
    const rss = rssMb(child.pid!);
    value(b, `history at scale (${label})`, 'server resident memory', rss, 'MB');
    return rss;
  } finally {
    await stop(child);
  }
}

/**
 * Scenario 12, history at scale: a server over a store of 1,000,000 versions across 1,000 contexts
 * (100,000 across 100 with --quick), made straight in the metadata database, against a server
 * over an empty store: query and commit p50 (goal ≤ 1.1×), resident memory (goal ≤ 1.2×), a
 * collection pass (its time, and the worst event-loop delay meanwhile), a usage report, start-up.
 */
export async function historyAtScale(b: Bench): Promise<void> {
  const contexts = b.quick ? 100 : 1000;
  const homes = [mkdtempSync(path.join(tmpdir(), 'shellbase-scale-empty-')), mkdtempSync(path.join(tmpdir(), 'shellbase-scale-big-'))];
  try {
    for (const home of homes) {
      const { child, sb } = await serve(home);
      await sb.contexts.create({ name: 'seed' }); // the image's root version
      await stop(child);
    }
    const f0 = performance.now();
    fill(homes[1], contexts, 1000);
    value(b, 'history at scale', `writing ${contexts * 1000} versions into the database`, performance.now() - f0, 'ms');
    value(b, 'history at scale', 'metadata database with them', dbBytes(homes[1]), 'bytes');
    const rssEmpty = await measure(b, 'empty store', homes[0], b.n);
    const rssBig = await measure(b, `${contexts * 1000} versions`, homes[1], b.n);
    value(b, `history at scale (${contexts * 1000} versions)`, 'resident memory against the empty store', rssBig / rssEmpty, '×');
  } finally {
    for (const h of homes) rmSync(h, { recursive: true, force: true });
  }
}
