import assert from 'node:assert/strict';
import { readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { after, before, test } from 'node:test';
import type pg from 'pg';
import { Shellbase, type MachineHandle } from '@shellbase/sdk';
import { PREFIX, startCluster, type ClusterWorkerProcess as Worker, type TestCluster } from './cluster-harness.ts';
import { sleep } from './harness.ts';

// Machines across the workers of a cluster: four worker processes over one Postgres and one S3 API
// (test/cluster-harness.ts). Machines run under TCG here: every restore takes seconds, so the
// tests are few and each VM small. A is drained (SIGTERM) and D killed (SIGKILL) on the way.
let cluster: TestCluster;
let workers: Worker[];
const sql = <T extends pg.QueryResultRow>(text: string) => cluster.sql<T>(text);

const COUNTER = "setsid -f sh -c 'i=0; while true; do i=$((i+1)); echo $i > /run/counter; sleep 0.1; done' >/dev/null 2>&1";
const counter = async (m: MachineHandle) => Number((await m.exec('cat /run/counter')).stdout.trim());
/** QEMU processes serving a worker's data directory (of one machine, with `id`). */
const qemus = (w: Worker, id = '') => readdirSync('/proc').filter((p) => /^\d+$/.test(p)).filter((p) => {
  try { const cmd = readFileSync(`/proc/${p}/cmdline`, 'utf8'); return cmd.startsWith('qemu-system') && cmd.includes(w.home) && cmd.includes(id); } catch { return false; }
});
/** The API address of the worker holding a machine's lease, or null. */
const leaseOf = async (id: string) => (await sql<{ address: string }>(`SELECT w.address FROM cluster_leases l JOIN cluster_workers w ON w.id = l.worker_id
  WHERE l.kind = 'machine' AND l.key = '${id}'`))[0]?.address ?? null;
/** The gateway of the worker running a service (by its path URL's token), or null. */
const serviceLease = async (pathUrl: string) => (await sql<{ gateway: string }>(`SELECT w.gateway FROM cluster_leases l JOIN cluster_workers w ON w.id = l.worker_id
  WHERE l.kind = 'service' AND '${pathUrl}' LIKE '%' || l.key || '%'`))[0]?.gateway ?? null;
const rowOf = async (id: string) => (await sql<{ state: string; spec: string }>(`SELECT state, spec FROM machines WHERE id = '${id}'`))[0];
const exited = (w: Worker) => new Promise((r) => { if (w.child.exitCode !== null || w.child.signalCode !== null) r(null); else w.child.once('exit', r); });
/** Waits until a killed worker's heartbeat has lapsed (the others take it for gone). */
async function lapsed(w: Worker): Promise<void> {
  for (;;) {
    const live = await sql<{ address: string }>(`SELECT address FROM cluster_workers WHERE heartbeat_at > now() - interval '900 milliseconds'`);
    if (!live.some((r) => r.address === w.url)) return;
    await sleep(100);
  }
}

before(async () => {
  cluster = await startCluster();
  workers = cluster.workers;
  await cluster.start('a');
  // D keeps a machine restored ahead (machines/pool/ready.ts) once a create made its template hot: its crash leaves one behind.
  await Promise.all([cluster.start('b'), cluster.start('c'), cluster.start('d', { SHELLBASE_MACHINES_READY: '1' })]);
});

after(async () => {
  // SHELLBASE_TEST_LOGS=DIR keeps each worker's log there.
  if (process.env.SHELLBASE_TEST_LOGS) for (const w of workers ?? []) writeFileSync(`${process.env.SHELLBASE_TEST_LOGS}/${w.name}.log`, w.log());
  await cluster?.stop();
});

test('cluster machines: made through A, used through B and C (passed to A), drained with A, restored by C with its files and processes', { timeout: 600_000 }, async () => {
  const [a, b, c] = workers;
  const made = await a.sb.machines.create({ memoryMb: 512 });
  const id = made.id;
  assert.equal(await leaseOf(id), a.url, 'placed on A by a lease');
  const viaB = b.sb.machines.get(id);
  await viaB.exec(`mkdir -p /srv/www && echo kept > /root/kept && echo page > /srv/www/index.html && ${COUNTER}`);
  await viaB.files.write('/root/from-b.txt', 'written through B');
  assert.equal((await c.sb.machines.get(id).files.read('/root/from-b.txt')).toString(), 'written through B');
  const events = [];
  for await (const e of viaB.execStream(['sh', '-c', 'echo one; sleep 0.2; echo two'])) events.push(e);
  assert.equal(events.filter((e) => e.type === 'stdout').map((e) => (e as { data: string }).data).join(''), 'one\ntwo\n', 'streamed through B');
  assert.equal((await c.sb.machines.get(id).info()).state, 'running');
  assert.deepEqual([qemus(b).length, qemus(c).length, qemus(a).length], [0, 0, 1], 'only A runs it');
  assert.equal(await leaseOf(id), a.url);

  // A guest port exposed through B, reached through C's gateway (passed to A's).
  await viaB.exec("setsid -f python3 -m http.server 8080 --directory /srv/www >/dev/null 2>&1; for i in $(seq 100); do python3 -c \"import socket; socket.create_connection(('127.0.0.1', 8080))\" 2>/dev/null && break; sleep 0.1; done");
  const port = await viaB.expose(8080);
  const page = await fetch(`${c.gatewayUrl}${new URL(port.pathUrl).pathname}index.html`);
  assert.equal(page.status, 200);
  assert.equal(await page.text(), 'page\n');

  // A service shared with the tenant, running on C (woken through C's gateway), answers the
  // machine on A at SERVICE.CONTEXT.internal: A's egress proxy passes the connection to C.
  const site = c.sb.context('linked-site');
  await site.files.write('/root/page.txt', 'linked page\n');
  const svc = await site.services.create({ name: 'www', command: 'cd /root && python3 -m http.server 8000', port: 8000, share: 'tenant' });
  assert.equal((await fetch(`${c.gatewayUrl}${new URL(svc.pathUrl).pathname}page.txt`)).status, 200);
  assert.equal(await serviceLease(svc.pathUrl), c.gatewayUrl, 'the service runs on C');
  const linked = await viaB.exec('curl -sS -m 30 http://www.linked-site.internal:8000/page.txt');
  assert.equal(linked.stdout, 'linked page\n', linked.stderr);
  await c.sb.context('linked-site').services.stop('www');

  // Bad input, passed to A, comes back typed.
  await assert.rejects(viaB.expose(0), (e: Error & { code?: string }) => e.code === 'invalid_argument');
  await assert.rejects(b.sb.machines.get('m_nosuchmachine').exec('true'), (e: Error & { code?: string }) => e.code === 'not_found');
  const other = new Shellbase({ url: b.url, apiKey: (await a.sb.tenants.create('cm-other')).apiKey });
  await assert.rejects(other.machines.get(id).exec('true'), (e: Error & { code?: string }) => e.code === 'not_found', "another tenant's key finds nothing");
  // The console log and the PTY's WebSocket are passed to A as the other calls are.
  await viaB.exec('echo cluster-console > /dev/console');
  assert.ok((await c.sb.machines.get(id).console({ tail: 50 })).lines.includes('cluster-console'), 'the log is the owner\'s');
  const pty = await viaB.pty();
  let shown = '';
  const typed = new Promise<void>((resolve) => pty.onData((d) => { shown += d.toString(); if (shown.includes('pty-7')) resolve(); }));
  pty.write('echo pty-$((3+4)); exit\r');
  await typed;
  assert.deepEqual(await pty.exited, { exitCode: 0 });
  await assert.rejects(other.machines.get(id).pty(), (e: Error & { code?: string }) => e.code === 'not_found');

  // Draining A (SIGTERM) hibernates the machine into the object store and gives its lease up.
  const before = await counter(viaB);
  a.child.kill('SIGTERM');
  await exited(a);
  const row = await rowOf(id);
  assert.equal(row.state, 'hibernated');
  const stored = (JSON.parse(row.spec) as { stored?: { format: number; ram: { digest: string }; disk: { digest: string }[] } }).stored;
  assert.ok(stored, 'its memory and disk are in the object store');
  assert.equal(stored.format, 1);
  const keys = new Set(await cluster.s3.keys(`${PREFIX}/sha256/`));
  for (const f of [stored.ram, ...stored.disk]) assert.ok(keys.has(`${PREFIX}/sha256/${f.digest.slice(7)}`), `blob ${f.digest}`);
  assert.equal(await leaseOf(id), null, 'a hibernated machine holds no lease');

  // The next call, on C, restores it there: files, processes and the exposed port as they were.
  const viaC = c.sb.machines.get(id);
  assert.equal((await viaC.exec('cat /root/kept /root/from-b.txt')).stdout, 'kept\nwritten through B');
  assert.equal(await leaseOf(id), c.url, 'C took the lease');
  assert.equal(qemus(c).length, 1);
  const after1 = await counter(viaC);
  assert.ok(after1 >= before, `the counter went on (${before} → ${after1})`);
  while ((await counter(viaC)) === after1) await sleep(100);
  const again = await fetch(`${b.gatewayUrl}${new URL(port.pathUrl).pathname}index.html`);
  assert.equal(await again.text(), 'page\n', "B's gateway reaches it on C");
  assert.equal((await b.sb.machines.get(id).info()).state, 'running');
  await b.sb.machines.get(id).remove();
  assert.equal(await leaseOf(id), null);
  assert.equal(qemus(c).length, 0);
});

test('cluster machines: a running machine whose worker was killed is lost; its snapshot restores on another worker; the worker\'s next start removes its ready machine\'s files', { timeout: 600_000 }, async () => {
  const [, b, c, d] = workers;
  const m = await d.sb.machines.create({ memoryMb: 512 });
  for (let i = 0; qemus(d).length < 2; i++) { assert.ok(i < 600, 'a ready machine on D after 60 s'); await sleep(100); }
  const readyId = readdirSync(`${d.home}/machines/run`).find((x) => x !== m.id)!;
  assert.ok(readyId, 'the ready machine\'s run directory');
  const disks = () => readdirSync(`${d.home}/machines/tenants/t_admin/disks`);
  assert.ok(disks().some((f) => f.startsWith(`${readyId}-`)), 'the ready machine\'s disk');
  await b.sb.machines.get(m.id).exec('echo before-snapshot > /root/s');
  const snapshot = await b.sb.machines.get(m.id).snapshot();
  await b.sb.machines.get(m.id).exec('echo after-snapshot > /root/s');
  d.child.kill('SIGKILL');
  await exited(d);
  for (let i = 0; qemus(d).length > 0; i++) { assert.ok(i < 100, 'D\'s QEMUs die with it'); await sleep(100); }
  // Started again over D's data: what the ready machine left goes; the lost machine's stays (it has a row).
  const again = await cluster.start('d-again', {}, d.home);
  assert.deepEqual(readdirSync(`${d.home}/machines/run`), [m.id], 'the ready machine\'s run directory went');
  assert.ok(!disks().some((f) => f.startsWith(`${readyId}-`)) && disks().some((f) => f.startsWith(`${m.id}-`)), `the ready machine's disk went, m's stayed: ${disks().join(' ')}`);
  again.child.kill('SIGTERM');
  await exited(again);
  await lapsed(d);
  const info = await c.sb.machines.get(m.id).info();
  assert.equal(info.state, 'lost');
  await assert.rejects(b.sb.machines.get(m.id).exec('true'), (e: Error & { code?: string }) => e.code === 'failed_precondition' && /lost/.test(e.message));
  assert.equal((await b.sb.machines.list()).find((x) => x.id === m.id)?.state, 'lost');
  const [copy] = await c.sb.machines.restore(snapshot);
  assert.equal((await b.sb.machines.get(copy.id).exec('cat /root/s')).stdout, 'before-snapshot\n', 'restored on C from the object store');
  assert.equal(await leaseOf(copy.id), c.url);
  await copy.remove();
  await b.sb.machines.get(m.id).remove();
  assert.deepEqual(await sql(`SELECT id FROM machines WHERE id = '${m.id}'`), []);
});

test('cluster machines: runningMachines counts machines on every worker', { timeout: 600_000 }, async () => {
  const [, b, c] = workers;
  const { apiKey } = await b.sb.tenants.create('cm-quota', { runningMachines: 1 });
  const [onB, onC] = [b, c].map((w) => new Shellbase({ url: w.url, apiKey }));
  const first = await onB.machines.create({ memoryMb: 512 });
  await assert.rejects(onC.machines.create({ memoryMb: 512 }), (e: Error & { code?: string }) => e.code === 'limit_exceeded' && /runningMachines/.test(e.message));
  await onC.machines.get(first.id).remove();
  const second = await onC.machines.create({ memoryMb: 512 });
  assert.equal(await leaseOf(second.id), c.url);
  await onB.machines.get(second.id).remove();
  const [tenant] = await sql<{ id: string }>(`SELECT id FROM tenants WHERE name = 'cm-quota'`);
  assert.deepEqual(await sql(`SELECT worker_id FROM cluster_slots WHERE tenant_id = '${tenant.id}' AND kind = 'machine' AND used > 0`), [], 'every slot given back');
});

test('cluster machines: a worker paused past its heartbeat loses its running machine to the worker that finds it lost; resumed, it ends its QEMU and writes nothing of it', { timeout: 600_000 }, async () => {
  const [, b, c] = workers;
  const m = await c.sb.machines.create({ memoryMb: 512 });
  const mine = () => qemus(c, m.id);
  assert.equal(mine().length, 1);
  c.child.kill('SIGSTOP');
  let stale: Promise<unknown> = Promise.resolve();
  try {
    await lapsed(c);
    assert.equal((await b.sb.machines.get(m.id).info()).state, 'lost', 'found lost through B while C is taken for gone');
    // Asked of C as it wakes, before (or as) its heartbeat finds the lease gone: C hibernates the
    // machine it still runs, and the write of its row is refused by the lease's epoch.
    stale = c.sb.machines.get(m.id).hibernate();
    stale.catch(() => undefined);
    await sleep(100);
  } finally {
    c.child.kill('SIGCONT');
  }
  await assert.rejects(stale, (e: Error & { code?: string }) => e.code === 'failed_precondition', 'the stale hibernation is refused');
  // C's next heartbeat finds that the lease is not its own any more: its QEMU ends.
  for (let i = 0; mine().length > 0; i++) { assert.ok(i < 150, 'C ends the QEMU of the machine it lost'); await sleep(100); }
  await sleep(1000);
  assert.equal((await rowOf(m.id)).state, 'lost', 'C wrote nothing of it');
  assert.equal((await c.sb.machines.get(m.id).info()).state, 'lost', 'C says so too');
  await c.sb.machines.get(m.id).remove();
  assert.deepEqual(await sql(`SELECT id FROM machines WHERE id = '${m.id}'`), []);
});
