import assert from 'node:assert/strict';
import { existsSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import type pg from 'pg';
import { Shellbase } from '@shellbase/sdk';
import { PREFIX, startCluster, type ClusterWorkerProcess as Worker, type TestCluster } from './cluster-harness.ts';
import { sleep } from './harness.ts';

// Three worker processes (each with a data directory of its own: its btrfs cache of layers and
// scratch space) over one Postgres and one S3 API, all real and on loopback (test/cluster-harness.ts).
let cluster: TestCluster;
let workers: Worker[];
const sql = <T extends pg.QueryResultRow>(text: string) => cluster.sql<T>(text);

/** Layers (not images) this worker's snapshotter holds. */
const localLayers = (w: Worker) => readdirSync(path.join(w.home, 'store', 'layers')).filter((n) => n.endsWith('.json')).map((n) => n.slice(0, -5));

before(async () => {
  cluster = await startCluster();
  workers = cluster.workers;
  await cluster.start('a');
  await Promise.all([cluster.start('b'), cluster.start('c')]);
});

after(async () => { await cluster?.stop(); });

test('cluster: three workers register, each a row with a heartbeat', async () => {
  const rows = await sql<{ address: string }>('SELECT address FROM cluster_workers ORDER BY address');
  assert.deepEqual(rows.map((r) => r.address), workers.map((w) => w.url).sort());
});

test('cluster: 60 concurrent queries on one context spread over three workers: every acknowledged write in the history exactly once', async () => {
  const [a] = workers;
  await a.sb.context('shared').exec('mkdir -p /root/w');
  const results = await Promise.all(Array.from({ length: 60 }, (_, i) =>
    workers[i % 3].sb.context('shared').exec(`echo ${i} > /root/w/${i}`)));
  assert.ok(results.every((r) => r.exitCode === 0 && r.committed), 'disjoint files always rebase');
  // Read back through another worker than the one that wrote most recently.
  const listing = await workers[1].sb.context('shared').exec('cd /root/w && for f in $(ls | sort -n); do printf "%s=%s " $f $(cat $f); done', { commit: 'never' });
  assert.equal(listing.stdout.trim(), Array.from({ length: 60 }, (_, i) => `${i}=${i}`).join(' '));
  const versions = await workers[2].sb.context('shared').versions({ limit: 200 });
  const acknowledged = new Set(results.map((r) => r.version));
  const inHistory = versions.map((v) => v.id).filter((id) => acknowledged.has(id));
  assert.equal(inHistory.length, 60, 'each acknowledged version once in the history');
  assert.equal(new Set(inHistory).size, 60);
  // Every layer a version names is in the object store.
  const missing = await sql<{ n: string }>(`SELECT count(*) AS n FROM layers l WHERE l.kind != 'image'
    AND NOT EXISTS (SELECT 1 FROM cluster_layer_blobs b WHERE b.layer_id = l.id)`);
  assert.equal(Number(missing[0].n), 0, 'no layer without its blob');
  const blobs = await cluster.s3.keys(`${PREFIX}/sha256/`);
  assert.ok(blobs.length >= 61, `blobs in the object store: ${blobs.length}`);
});

test('cluster: a fork made on A, written on B, read through the files API on C (which fetches the layers)', async () => {
  const [a, b, c] = workers;
  await a.sb.context('origin').exec('mkdir -p /root/app && echo original > /root/app/a.txt');
  await a.sb.context('origin').fork('forked');
  const wrote = await b.sb.context('forked').exec('echo from-b > /root/app/b.txt && echo changed >> /root/app/a.txt');
  assert.ok(wrote.committed);
  const head = (await c.sb.context('forked').info()).head;
  const version = (await c.sb.context('forked').versions({ limit: 1 }))[0];
  assert.equal(version.id, head);
  const before = new Set(localLayers(c));
  assert.equal(Buffer.from(await c.sb.context('forked').files.read('/root/app/b.txt')).toString(), 'from-b\n');
  assert.equal(Buffer.from(await c.sb.context('forked').files.read('/root/app/a.txt')).toString(), 'original\nchanged\n');
  assert.equal(Buffer.from(await c.sb.context('origin').files.read('/root/app/a.txt')).toString(), 'original\n', 'the origin is untouched');
  const fetched = localLayers(c).filter((l) => !before.has(l));
  assert.ok(fetched.length >= 2, `C fetched the fork's layers from the object store (${fetched.length})`);
  // And a query on C runs over them.
  const r = await c.sb.context('forked').exec('cat /root/app/a.txt /root/app/b.txt', { commit: 'never' });
  assert.equal(r.stdout, 'original\nchanged\nfrom-b\n');
});

test('cluster: garbage collection runs on one worker at a time and keeps what the others use', async () => {
  const [a, b] = workers;
  const doomed = await a.sb.context('doomed').exec('echo bye > /root/bye');
  const [{ layers }] = await sql<{ layers: string }>(`SELECT layers FROM versions WHERE id = '${doomed.version}'`);
  const layer = (JSON.parse(layers) as string[]).at(-1)!;
  await a.sb.context('doomed').delete();
  const running = b.sb.context('shared').exec('sleep 1; cat /root/w/7', { commit: 'never' });
  await Promise.all([a.sb.gc(), b.sb.gc()]);
  assert.equal((await running).stdout, '7\n');
  assert.deepEqual(await sql(`SELECT id FROM versions WHERE id = '${doomed.version}'`), [], "the deleted context's version went");
  assert.deepEqual(await sql(`SELECT layer_id FROM cluster_layer_blobs WHERE layer_id = '${layer}'`), [], "and its layer's blob record");
  assert.equal((await sql(`SELECT digest FROM cluster_blob_deletions`)).length >= 1, true, 'its blob waits out the grace period');
  assert.equal((await workers[2].sb.context('shared').exec('cat /root/w/59', { commit: 'never' })).stdout, '59\n');
});

const ID_SERVER = `import http.server, os, random
me = str(random.random()).encode()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(me)
http.server.HTTPServer(('127.0.0.1', int(os.environ.get('PORT', '8000'))), H).serve_forever()
`;

test("cluster: a service defined on A runs on one worker at a time: woken through B's gateway, reached through C's and A's gateways and C's API", async () => {
  const [a, b, c] = workers;
  await a.sb.context('web').files.write('/root/id.py', ID_SERVER);
  const svc = await a.sb.context('web').services.create({ name: 'id', command: 'python3 /root/id.py', port: 8000 });
  const token = new URL(svc.pathUrl).pathname.split('/')[2];
  const get = async (w: Worker) => {
    const res = await fetch(`${w.gatewayUrl}/s/${token}/`);
    assert.equal(res.status, 200, `through ${w.name}`);
    return res.text();
  };
  const first = await get(b);
  assert.equal(await get(c), first, "C's gateway passes the request to B, where it runs");
  assert.equal(await get(a), first, "and so does A's");
  // A TCP tunnel through C's API reaches the same run on B.
  const tunnel = await c.sb.context('web').services.stream('id');
  const answer = await new Promise<string>((resolve, reject) => {
    let text = '';
    tunnel.on('data', (chunk: Buffer) => { text += chunk.toString(); });
    tunnel.on('end', () => resolve(text));
    tunnel.on('error', reject);
    tunnel.write('GET / HTTP/1.0\r\n\r\n');
  });
  assert.ok(answer.startsWith('HTTP/1.0 200') && answer.endsWith(first), answer);
  const [lease] = await sql<{ gateway: string; epoch: string }>(`SELECT w.gateway, l.epoch FROM cluster_leases l JOIN cluster_workers w ON w.id = l.worker_id
    WHERE l.kind = 'service' AND l.key = '${token}'`);
  assert.equal(lease.gateway, b.gatewayUrl);
  assert.equal((await c.sb.context('web').services.get('id')).state, 'running', "C's API says where it runs: awake");
  const awake = async () => Number((await sql<{ n: string }>(`SELECT COALESCE(SUM(used), 0) AS n FROM cluster_slots WHERE kind = 'service'`))[0].n);
  assert.equal(await awake(), 1, 'one runningServices slot, on B');
  await b.sb.context('web').services.stop('id');
  assert.deepEqual(await sql(`SELECT key FROM cluster_leases WHERE key = '${token}'`), [], 'a service asleep holds no lease');
  assert.equal(await awake(), 0, 'nor a slot');
  const second = await get(c);
  assert.notEqual(second, first, 'woken again, now on C');
  assert.equal(await get(b), second);
});

test("cluster: a tenant's concurrentQueries and runningServices quotas count on every worker", async () => {
  const { apiKey } = await workers[0].sb.tenants.create('quota-tenant', { concurrentQueries: 2, runningServices: 1 });
  const as = (w: Worker) => new Shellbase({ url: w.url, apiKey });
  const [tenant] = await sql<{ id: string }>(`SELECT id FROM tenants WHERE name = 'quota-tenant'`);
  const slots = async () => Number((await sql<{ n: string }>(`SELECT COALESCE(SUM(used), 0) AS n FROM cluster_slots WHERE tenant_id = '${tenant.id}'`))[0].n);
  const long = [as(workers[0]), as(workers[1])].map((sb) => sb.context('q').exec('sleep 4', { commit: 'never' }));
  while ((await slots()) < 2) await sleep(50);
  await assert.rejects(as(workers[2]).context('q').exec('true'), (e: Error & { code?: string }) => e.code === 'limit_exceeded' && /concurrentQueries/.test(e.message));
  // The query's target is read beside its admission; a refused query on a new context makes none.
  await assert.rejects(as(workers[1]).context('q-new').exec('true'), (e: Error & { code?: string }) => e.code === 'limit_exceeded');
  assert.deepEqual(await sql(`SELECT name FROM contexts WHERE tenant_id = '${tenant.id}' AND name = 'q-new'`), []);
  assert.ok((await Promise.all(long)).every((r) => r.exitCode === 0));
  assert.deepEqual(await sql(`SELECT name FROM contexts WHERE tenant_id = '${tenant.id}' AND name = 'q-new'`), [], 'nor later');
  assert.equal(await slots(), 0, 'every slot given back');
  assert.equal((await as(workers[2]).context('q').exec('echo ok')).stdout, 'ok\n');
  assert.equal((await as(workers[1]).context('q-new').exec('echo made')).stdout, 'made\n', 'admitted, it makes its context');

  // runningServices: 1, counted over the workers: a second service woken on another worker is refused.
  const ctx = as(workers[0]).context('qs');
  await ctx.files.write('/root/id.py', ID_SERVER);
  const [one, two] = await Promise.all(['one', 'two'].map((name, i) => ctx.services.create({ name, command: 'python3 /root/id.py', port: 8000 + i, env: { PORT: String(8000 + i) } })));
  const viaGateway = (w: Worker, svc: { pathUrl: string }) => fetch(`${w.gatewayUrl}${new URL(svc.pathUrl).pathname}`);
  assert.equal((await viaGateway(workers[0], one)).status, 200);
  const refused = await viaGateway(workers[1], two);
  assert.equal(refused.status, 429);
  assert.match(await refused.text(), /runningServices/);
  await ctx.services.stop('one');
  assert.equal((await viaGateway(workers[1], two)).status, 200, 'once the first sleeps, the second wakes');
  await as(workers[1]).context('qs').services.stop('two');
});

test('cluster: a worker killed with SIGKILL in the middle of commits loses nothing acknowledged; it lapses and the others carry on', async () => {
  const c = workers[2];
  const acknowledged: string[] = [];
  let settled = 0;
  const writes = Array.from({ length: 12 }, (_, i) => c.sb.context('killed').exec(`echo ${i} > /root/k${i}`)
    .then((r) => { if (r.committed) acknowledged.push(`k${i}`); }, () => undefined).finally(() => { settled++; }));
  while (acknowledged.length < 3 && settled < 12) await sleep(20);
  assert.ok(acknowledged.length >= 3, 'commits were acknowledged before the kill');
  c.child.kill('SIGKILL');
  await new Promise((r) => c.child.once('exit', r));
  await Promise.all(writes);
  const listed = (await workers[0].sb.context('killed').files.list('/root')).map((e) => e.name);
  for (const name of acknowledged) assert.ok(listed.includes(name), `${name} was acknowledged`);
  // Every layer any version names has its blob in the object store.
  const named = await sql<{ layer: string; digest: string | null }>(`SELECT DISTINCT l.layer, b.digest FROM versions v,
    LATERAL json_array_elements_text(v.layers::json) AS l(layer) LEFT JOIN cluster_layer_blobs b ON b.layer_id = l.layer WHERE l.layer NOT LIKE 'image:%'`);
  const keys = new Set(await cluster.s3.keys(`${PREFIX}/sha256/`));
  for (const n of named) assert.ok(n.digest && keys.has(`${PREFIX}/sha256/${n.digest.slice(7)}`), `layer ${n.layer} has its blob`);
  for (;;) {
    const live = await sql<{ address: string }>(`SELECT address FROM cluster_workers WHERE heartbeat_at > now() - interval '900 milliseconds'`);
    if (!live.some((w) => w.address === c.url)) break;
    await sleep(100);
  }
  const r = await workers[0].sb.context('shared').exec('echo after > /root/after');
  assert.ok(r.committed);
  assert.equal(Buffer.from(await workers[1].sb.context('shared').files.read('/root/after')).toString(), 'after\n');
});
