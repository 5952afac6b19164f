import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { rank } from '../packages/server/src/cluster/locality.ts';
import { startCluster, type ClusterWorkerProcess as Worker, type TestCluster } from './cluster-harness.ts';
import { sleep } from './harness.ts';

// Locality (SHELLBASE_LOCALITY=on): three workers; a context's queries, sent to any of them, run
// on its preferred worker (rendezvous hashing over the live workers); when that worker is gone,
// on the next one. Which worker ran a query is read from each one's shellbase_queries_total.
let cluster: TestCluster;
let workers: Worker[];
const ON = { SHELLBASE_LOCALITY: 'on' };

before(async () => {
  cluster = await startCluster();
  workers = cluster.workers;
  await cluster.start('a', ON);
  await Promise.all([cluster.start('b', ON), cluster.start('c', ON)]);
});

after(async () => { await cluster?.stop(); });

async function ran(w: Worker): Promise<number> {
  const text = await (await fetch(`${w.url}/metrics`)).text();
  return [...text.matchAll(/^shellbase_queries_total\{[^}]*\} (\d+)/gm)].reduce((n, m) => n + Number(m[1]), 0);
}
const counts = () => Promise.all(workers.filter((w) => w.child.exitCode === null && w.child.signalCode === null).map(async (w) => [w.name, await ran(w)] as const));

/** The workers in the order the context prefers them (what every worker computes from cluster_workers). */
async function preference(context: string): Promise<Worker[]> {
  const rows = await cluster.sql<{ id: string; address: string }>('SELECT id, address FROM cluster_workers');
  const [tenant] = await cluster.sql<{ id: string }>('SELECT id FROM tenants WHERE admin = 1');
  return rank(`${tenant.id}/${context}`, rows).map((r) => workers.find((w) => w.url === r.address)!);
}

/** Runs `n` queries on the context through each live worker; returns how many each worker ran. */
async function spread(context: string, through: Worker[], n: number): Promise<Map<string, number>> {
  const before = new Map(await counts());
  for (let i = 0; i < n; i++) for (const w of through) assert.equal((await w.sb.context(context).exec('true', { commit: 'never' })).exitCode, 0);
  const out = new Map<string, number>();
  for (const [name, now] of await counts()) out.set(name, now - (before.get(name) ?? 0));
  return out;
}

test('cluster locality: a context\'s queries run on its preferred worker, wherever they land', async () => {
  await workers[0].sb.context('loc').exec('echo hi > /root/x');
  // b and c started together: each learns of the other at its next heartbeat (300 ms here); until
  // then it runs the context's queries itself. Two heartbeats, and every view of the cluster is current.
  await sleep(700);
  const [preferred] = await preference('loc');
  const ran3 = await spread('loc', workers, 3);
  assert.deepEqual(Object.fromEntries(ran3), Object.fromEntries(workers.map((w) => [w.name, w === preferred ? 9 : 0])));
  // Writes forwarded too: committed once, read back anywhere.
  const r = await workers.find((w) => w !== preferred)!.sb.context('loc').exec('echo there >> /root/x');
  assert.equal(r.committed, true);
  assert.equal((await workers[2].sb.context('loc').exec('cat /root/x', { commit: 'never' })).stdout, 'hi\nthere\n');
});

test('cluster locality: when the preferred worker is gone, the context\'s queries run on the next one', async () => {
  const [first, second] = await preference('loc');
  first.child.kill('SIGTERM'); // it leaves: its row goes, and the others see so at their next heartbeat
  await new Promise((r) => first.child.once('exit', r));
  const rest = workers.filter((w) => w !== first);
  // Until the others' next heartbeat (300 ms here) they may still pass a query to the one that
  // left: that query fails with 503 and the worker stops passing to it.
  for (let i = 0; i < 50; i++) {
    const tries = await Promise.all(rest.map((w) => w.sb.context('loc').exec('true', { commit: 'never' }).then(() => true, () => false)));
    if (tries.every(Boolean)) break;
    await sleep(100);
  }
  await sleep(700); // two heartbeats: every view of the cluster is current
  const ran = await spread('loc', rest, 3);
  assert.deepEqual(Object.fromEntries(ran), Object.fromEntries(rest.map((w) => [w.name, w === second ? 6 : 0])));
});
