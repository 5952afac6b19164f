import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Shellbase, ShellbaseError } from '@shellbase/sdk';
import { startCluster, type ClusterWorkerProcess as Worker, type TestCluster } from './cluster-harness.ts';
import { sleep } from './harness.ts';

// Round trips to Postgres per request, as a worker counts them (GET /metrics,
// shellbase_metadata_round_trips_total{work="request"}): counts, not timings, so they cannot
// creep back up unnoticed (docs/performance.md, Cluster). Heartbeats and collection run rarely
// here, and are counted apart anyway.
let cluster: TestCluster;
let a: Worker;
let b: Worker;

const SLOW = { SHELLBASE_HEARTBEAT_MS: '60000', SHELLBASE_GC_INTERVAL_MS: '3600000' };

before(async () => {
  cluster = await startCluster();
  a = await cluster.start('a', SLOW);
  b = await cluster.start('b', SLOW);
});

after(async () => { await cluster?.stop(); });

async function trips(w: Worker): Promise<number> {
  const text = await (await fetch(`${w.url}/metrics`)).text();
  const m = /^shellbase_metadata_round_trips_total\{work="request"\} (\d+)/m.exec(text);
  assert.ok(m, 'the worker counts its round trips');
  return Number(m[1]);
}

/** Round trips per call of `fn`, over `n` calls. */
async function per(w: Worker, n: number, fn: (i: number) => Promise<unknown>): Promise<number> {
  const before = await trips(w);
  for (let i = 0; i < n; i++) await fn(i);
  return ((await trips(w)) - before) / n;
}

test('cluster round trips: a read-only query costs 3, a committing one 5 (the goals: at most 3 and 5)', async () => {
  const ctx = a.sb.context('trips');
  await ctx.exec('true'); // made, and the key looked up once
  // Admission (a quota slot), the context with its head and services, the slot's release with the usage row.
  assert.equal(await per(a, 10, () => ctx.exec('true', { commit: 'never' })), 3);
  // … and the commit: the layer's blob recorded, the version and head in one statement.
  assert.equal(await per(a, 10, (i) => ctx.exec(`echo ${i} > /root/f${i}`)), 5);
  // A context with services reads them in the same statement.
  await ctx.services.create({ name: 'web', command: 'sleep infinity', port: 8080 });
  await ctx.exec('true', { commit: 'never' }); // the tenant's shared services, read again once after a change
  assert.equal(await per(a, 5, () => ctx.exec('true', { commit: 'never' })), 3);
});

test('cluster round trips: a commit whose head moved on another worker rebases as before (more round trips, same outcome)', async () => {
  const ctx = a.sb.context('moved');
  await ctx.exec('echo 0 > /root/a');
  const base = (await ctx.exec('true', { commit: 'never' })).version;
  await b.sb.context('moved').exec('echo 1 > /root/b');
  const r = await ctx.exec('echo 2 > /root/c', { version: base });
  assert.equal(r.committed, true, 'disjoint paths rebase');
  const out = await b.sb.context('moved').exec('cat /root/a /root/b /root/c', { commit: 'never' });
  assert.equal(out.stdout, '0\n1\n2\n');
  const conflict = await ctx.exec('echo 3 > /root/b', { version: base });
  assert.equal(conflict.committed, false);
  assert.deepEqual(conflict.conflict?.paths, ['/root/b']);
});

test('cluster round trips: an API key is looked up once per worker, and a revoke on one worker holds on the others', async () => {
  const { apiKey } = await a.sb.tenants.create('cached-key');
  const onB = new Shellbase({ url: b.url, apiKey });
  await onB.context('k').exec('true');
  // The key is kept: a second query does not look it up again.
  assert.equal(await per(b, 5, () => onB.context('k').exec('true', { commit: 'never' })), 3);
  const [key] = await a.sb.tenants.listKeys('cached-key');
  await a.sb.tenants.revokeKey('cached-key', key.id);
  // B hears of the revoke from Postgres (a notification sent when the revoke commits): at once
  // on loopback, waited for here only so that the test does not depend on the scheduler.
  let refused: unknown = null;
  for (let i = 0; i < 100 && !refused; i++) {
    refused = await onB.context('k').exec('true', { commit: 'never' }).then(() => null, (e: unknown) => e);
    if (!refused) await sleep(20);
  }
  assert.ok(refused instanceof ShellbaseError && refused.code === 'unauthorized', `refused: ${String(refused)}`);
  // And a quota set on A applies on B.
  const { apiKey: k2 } = await a.sb.tenants.create('quota-later');
  const sb2 = new Shellbase({ url: b.url, apiKey: k2 });
  await sb2.context('q').exec('true');
  await a.sb.tenants.update('quota-later', { quotas: { contexts: 1 } });
  let limited: unknown = null;
  for (let i = 0; i < 100 && !limited; i++) {
    limited = await sb2.context(`q${i}`).exec('true', { commit: 'never' }).then(() => null, (e: unknown) => e);
    if (!limited) await sleep(20);
  }
  assert.ok(limited instanceof ShellbaseError && limited.code === 'limit_exceeded', `limited: ${String(limited)}`);
});
