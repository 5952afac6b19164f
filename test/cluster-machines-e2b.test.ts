import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { connect } from 'node:net';
import path from 'node:path';
import { after, before, test } from 'node:test';
import type pg from 'pg';
import { Sandbox, SandboxNotFoundError, type SandboxOpts } from 'e2b';
import { PREFIX, startCluster, type ClusterWorkerProcess as Worker, type TestCluster } from './cluster-harness.ts';
import { sleep } from './harness.ts';

// The unmodified `e2b` SDK against a cluster of two workers over one Postgres and one S3 API
// (test/cluster-harness.ts): a sandbox made through A is used through B (passed to A), its timer
// is acted on by whichever worker runs it, and what is passed between workers needs the proof.
// One sandbox (one VM under TCG) lives through both tests; it is killed in the end, failures included.
const DOMAIN = 'e2b.test';
/** A's machines hibernate after this long without use: the sandbox moves to the next worker that uses it. */
const IDLE_MS = 12_000;

let cluster: TestCluster;
let a: Worker;
let b: Worker;
let key = '';
let id = '';

const sql = <T extends pg.QueryResultRow>(text: string) => cluster.sql<T>(text);
/** The SDK pointed at one worker (control plane and envd both). */
const on = (w: Worker, extra: SandboxOpts = {}): SandboxOpts => ({ apiUrl: w.url, sandboxUrl: w.url, apiKey: key, domain: DOMAIN, ...extra });
/** The API address of the worker holding a machine's lease, or null. */
const leaseOf = async (m: string) => (await sql<{ address: string }>(`SELECT w.address FROM cluster_leases l JOIN cluster_workers w ON w.id = l.worker_id
  WHERE l.kind = 'machine' AND l.key = '${m}'`))[0]?.address ?? null;
const stateOf = async (m: string) => (await sql<{ state: string }>(`SELECT state FROM machines WHERE id = '${m}'`))[0]?.state ?? null;
/** The digests of the stored files a machine's or snapshot's row names (sorted). */
const storedOf = async (table: 'machines' | 'machine_snapshots', rowId: string) => {
  const [row] = await sql<{ spec: string }>(`SELECT spec FROM ${table} WHERE id = '${rowId}'`);
  const st = (JSON.parse(row.spec) as { stored?: { ram: { digest: string }; state: { digest: string }; disk: { digest: string }[] } }).stored;
  return st ? [...new Set([st.ram.digest, st.state.digest, ...st.disk.map((f) => f.digest)])].sort() : [];
};
/** The frozen files of a row's stored disk chain (every file below the writable top), sorted. */
const frozenOf = async (table: 'machines' | 'machine_snapshots', rowId: string) => {
  const [row] = await sql<{ spec: string }>(`SELECT spec FROM ${table} WHERE id = '${rowId}'`);
  const st = (JSON.parse(row.spec) as { stored?: { disk: { digest: string }[] } }).stored;
  return st ? [...new Set(st.disk.slice(1).map((f) => f.digest))].sort() : [];
};
/** The blobs a machine or snapshot holds in the cluster's reference table (sorted). */
const heldBy = async (owner: string) => (await sql<{ digest: string }>(`SELECT digest FROM cluster_machine_blobs WHERE owner = '${owner}' ORDER BY digest`)).map((r) => r.digest);
const TIMER_FAILED = /ending an E2B sandbox at its timeout failed|arming the timeout/;

async function until(what: string, check: () => boolean | Promise<boolean>, ms = 60_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(200);
  }
}

/** A plain HTTP request to a worker's API with a `Host` of our choosing (a sandbox's port host). */
function get(w: Worker, host: string, p: string, headers: Record<string, string> = {}): Promise<{ status: number; body: string }> {
  const api = new URL(w.url);
  return new Promise((resolve, reject) => {
    const req = request({ host: api.hostname, port: api.port, path: p, headers: { host, ...headers }, agent: false }, (res) => {
      let body = '';
      res.on('data', (c) => { body += c; });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

/** An upgrade to a guest port through a worker's API; what came back until the connection closed. */
function upgrade(w: Worker, host: string, extra: string[] = []): Promise<string> {
  const api = new URL(w.url);
  return new Promise((resolve, reject) => {
    const sock = connect(Number(api.port), api.hostname, () => sock.write([`GET / HTTP/1.1`, `Host: ${host}`, 'Connection: Upgrade', 'Upgrade: echo', ...extra, '', ''].join('\r\n')));
    let got = '';
    sock.on('data', (c) => { got += c; if (got.endsWith('\r\n\r\n') && got.startsWith('HTTP/1.1 101')) sock.write('piped'); if (got.includes('PIPED')) sock.end(); });
    sock.on('close', () => resolve(got));
    sock.on('error', reject);
  });
}

/** A proof as workers make them (cluster/peers.ts), under the cluster secret stored in Postgres. */
async function proof(method: string, host: string, p: string): Promise<string> {
  const [{ value }] = await sql<{ value: string }>(`SELECT value FROM cluster_secrets WHERE name = 'forward'`);
  const at = String(Date.now());
  const mac = createHmac('sha256', Buffer.from(value)).update(['v1', method, host.toLowerCase(), p, 'w_test', at].join('\n')).digest('base64url');
  return `v1 w_test ${at} ${mac}`;
}

before(async () => {
  cluster = await startCluster();
  // A grace period of 1 ms: the blobs of machines and snapshots that went are deleted by the next collection.
  const env = { SHELLBASE_BLOB_GRACE_MS: '1' };
  a = await cluster.start('a', { ...env, SHELLBASE_MACHINES_IDLE_MS: String(IDLE_MS) });
  b = await cluster.start('b', env);
  key = readFileSync(path.join(a.home, 'admin.key'), 'utf8').trim();
  // Nothing of the SDK's own defaults: every call names its worker.
  for (const v of ['E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_API_KEY', 'E2B_DOMAIN', 'E2B_DEBUG']) delete process.env[v];
});

after(async () => {
  if (id) await Sandbox.kill(id, on(b)).catch(() => undefined);
  if (process.env.SHELLBASE_TEST_LOGS) for (const w of cluster?.workers ?? []) writeFileSync(`${process.env.SHELLBASE_TEST_LOGS}/${w.name}.log`, w.log());
  await cluster?.stop();
});

test('cluster E2B: a sandbox made through A is used through B (commands, files, ports, timeout, list); the proof is required', { timeout: 600_000 }, async () => {
  const made = await Sandbox.create(on(a, { metadata: { suite: 'cluster-e2b' }, timeoutMs: 600_000, lifecycle: { onTimeout: 'pause' } }));
  id = made.sandboxId;
  assert.equal(await leaseOf(id), a.url, 'its machine runs on A');

  // Through B: connect (the control plane), commands with streamed output, files both ways.
  const viaB = await Sandbox.connect(id, on(b));
  const r = await viaB.commands.run('echo "hi from $(id -un)"');
  assert.deepEqual([r.exitCode, r.stdout], [0, 'hi from user\n']);
  const chunks: string[] = [];
  const streamed = await viaB.commands.run('echo one; sleep 0.5; echo two', { onStdout: (d) => { chunks.push(d); } });
  assert.equal(streamed.stdout, 'one\ntwo\n');
  assert.equal(chunks.join(''), 'one\ntwo\n');
  assert.ok(chunks.length >= 2, `the output streamed through B as it came (${JSON.stringify(chunks)})`);
  await viaB.files.write('from-b.txt', 'written through B');
  assert.equal(await made.files.read('from-b.txt'), 'written through B', 'read through A');
  await made.files.write('from-a.txt', 'written through A');
  assert.equal(await viaB.files.read('from-a.txt'), 'written through A');
  assert.ok((await viaB.files.list('.')).some((e) => e.name === 'from-b.txt'));
  // A signed URL names no sandbox: B finds it by the signature, and passes it to A with its name.
  const signed = await fetch(await viaB.downloadUrl('from-b.txt'));
  assert.equal(await signed.text(), 'written through B');
  assert.equal(await leaseOf(id), a.url, 'all of it was served by A');

  // The control plane through B: info, list, timeout.
  const info = await Sandbox.getInfo(id, on(b));
  assert.deepEqual([info.state, info.metadata], ['running', { suite: 'cluster-e2b' }]);
  assert.ok((await Sandbox.list(on(b)).nextItems()).some((s) => s.sandboxId === id), 'B lists the sandbox A runs');
  await viaB.setTimeout(400_000);
  const later = await Sandbox.getInfo(id, on(a));
  assert.ok(Math.abs(later.endAt.getTime() - (Date.now() + 400_000)) < 20_000, String(later.endAt));

  // A guest port through B's API: plain requests and an upgrade (a byte pipe to a guest server that answers 101).
  await viaB.files.write('site/index.html', 'hello from the sandbox');
  const web = await viaB.commands.run(`cd site && python3 -c "import socketserver, http.server as h; socketserver.TCPServer(('', 8000), h.SimpleHTTPRequestHandler).serve_forever()"`, { background: true, timeoutMs: 0 });
  await viaB.files.write('upgrade.py', [
    'import socket', 's = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("", 9000)); s.listen()',
    'while True:', '  c, _ = s.accept(); d = b""', '  while b"\\r\\n\\r\\n" not in d: d += c.recv(4096)',
    '  c.sendall(b"HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: echo\\r\\nConnection: Upgrade\\r\\n\\r\\n")',
    '  while (x := c.recv(4096)): c.sendall(x.upper())', '  c.close()', '',
  ].join('\n'));
  const echo = await viaB.commands.run('python3 upgrade.py', { background: true, timeoutMs: 0 });
  let page = { status: 0, body: '' };
  await until('the guest server', async () => { page = await get(b, viaB.getHost(8000), '/index.html'); return page.status === 200; });
  assert.equal(page.body, 'hello from the sandbox');
  let piped = '';
  await until('the upgrade', async () => { piped = await upgrade(b, viaB.getHost(9000)); return piped.includes('PIPED'); });
  assert.match(piped, /^HTTP\/1.1 101 Switching Protocols\r\n[^]*\r\n\r\nPIPED$/);
  // Their output streams would hold the machine in use: the processes go on without them.
  await web.disconnect();
  await echo.disconnect();

  // Credentials are checked where the call lands (and again where it is served).
  const list = (w: Worker, headers: Record<string, string>) => fetch(`${w.url}/process.Process/List`, {
    method: 'POST', headers: { 'content-type': 'application/json', 'e2b-sandbox-id': id, ...headers }, body: '{}',
  });
  assert.equal((await list(b, { 'x-access-token': 'wrong' })).status, 401);
  const token = ((await (await fetch(`${b.url}/sandboxes/${id}`, { headers: { 'x-api-key': key } })).json()) as { envdAccessToken: string }).envdAccessToken;
  assert.equal((await list(b, { 'x-access-token': token })).status, 200);
  // The forwarding path wants the cluster's proof: a marked request without a valid one is refused, on either worker.
  const bogus = 'v1 w_x 0 AAAA';
  assert.equal((await list(b, { 'x-access-token': token, 'x-shellbase-forwarded': bogus })).status, 401);
  assert.equal((await list(a, { 'x-access-token': token, 'x-shellbase-forwarded': bogus })).status, 401);
  assert.equal((await fetch(`${a.url}/sandboxes/${id}`, { headers: { 'x-api-key': key, 'x-shellbase-forwarded': bogus } })).status, 401);
  assert.equal((await get(b, viaB.getHost(8000), '/index.html', { 'x-shellbase-forwarded': bogus })).status, 401);
  assert.match(await upgrade(b, viaB.getHost(9000), [`x-shellbase-forwarded: ${bogus}`]), /^HTTP\/1\.1 401/);
  // A proof made for another path does not carry over.
  const host = new URL(b.url).host;
  assert.equal((await list(b, { 'x-access-token': token, 'x-shellbase-forwarded': await proof('POST', host, '/process.Process/Start') })).status, 401);
  // A request with a valid proof is served where it lands, never passed on again: B does not run the sandbox.
  const once = await list(b, { 'x-access-token': token, 'x-shellbase-forwarded': await proof('POST', host, '/process.Process/List') });
  assert.notEqual(once.status, 200);
  assert.match(await once.text(), /runs on another worker/);
  assert.equal(await leaseOf(id), a.url);

  // A signed URL that names its sandbox is checked where it lands: one with a wrong signature is
  // refused by B without reaching A (stopped for the moment, A could not answer a request passed to it).
  const forged = new URL(await viaB.downloadUrl('from-b.txt'));
  forged.searchParams.set('signature', 'v1_forged');
  a.child.kill('SIGSTOP');
  try {
    const refused = await fetch(`${b.url}${forged.pathname}${forged.search}`, { headers: { 'e2b-sandbox-id': id }, signal: AbortSignal.timeout(5000) });
    assert.equal(refused.status, 401);
  } finally {
    a.child.kill('SIGCONT');
  }
});

test('cluster E2B: the timeout is acted on by the worker running the sandbox, which takes the deadline over when the machine moves; collection deletes the blobs of its hibernations and snapshot', { timeout: 600_000 }, async () => {
  assert.ok(id, 'the first test made the sandbox');
  // The end of life is set through A (which runs it); then nothing uses it and it hibernates into
  // the object store, giving its lease up.
  const viaA = await Sandbox.connect(id, on(a));
  await viaA.setTimeout(IDLE_MS + 35_000);
  const endAt = (await Sandbox.getInfo(id, on(b))).endAt.getTime();
  await until('the idle machine to hibernate', async () => (await stateOf(id)) === 'hibernated' && (await leaseOf(id)) === null, IDLE_MS + 60_000);
  assert.equal((await Sandbox.getInfo(id, on(b))).state, 'running', 'hibernated when idle, a sandbox is still running to E2B');

  // Used through B's envd, it wakes there (from the object store): B runs it, and takes its
  // deadline over. (Connected through A's control plane, which does not wake it, with a timeout
  // that leaves its end of life as it is: connect only ever extends it.)
  const viaB = await Sandbox.connect(id, { ...on(a, { timeoutMs: 1000 }), sandboxUrl: b.url });
  assert.equal((await viaB.commands.run('cat from-a.txt')).stdout, 'written through A');
  assert.equal(await leaseOf(id), b.url, 'woken on B');
  assert.equal((await get(a, viaB.getHost(8000), '/index.html')).body, 'hello from the sandbox', 'its guest port through A, passed to B');
  assert.equal((await Sandbox.getInfo(id, on(a))).endAt.getTime(), endAt, 'the wake kept the deadline');
  // Kept busy on B until its time is up: B pauses it (on timeout: pause), A's timer lets it be.
  await until('the timeout', async () => {
    if ((await Sandbox.getInfo(id, on(a))).state === 'paused') return true;
    await viaB.commands.run('true').catch(() => undefined);
    return false;
  }, endAt - Date.now() + 60_000);
  assert.ok(Date.now() >= endAt - 1000, 'not before its end of life');
  await until('the paused machine to hibernate', async () => (await stateOf(id)) === 'hibernated' && (await leaseOf(id)) === null);
  const stored = await storedOf('machines', id);
  assert.ok(stored.length >= 3, 'its memory and disk are in the object store');
  assert.deepEqual(await heldBy(id), stored, 'held by the machine');
  const frozen = await frozenOf('machines', id);
  assert.ok(frozen.length >= 1, 'its disk chain has frozen files below its top (the template\'s)');
  for (const w of [a, b]) assert.doesNotMatch(w.log(), TIMER_FAILED, `${w.name}'s log`);

  // Connect through A resumes it there; kill through B is passed to A.
  const back = await Sandbox.connect(id, on(a));
  assert.equal(await leaseOf(id), a.url);
  assert.equal((await Sandbox.getInfo(id, on(b))).state, 'running');
  assert.deepEqual(await heldBy(id), frozen, 'running again, it still holds the frozen files of its disk (its next hibernation names them again), and nothing else');
  const viaB2 = await Sandbox.connect(id, on(b));
  assert.equal((await viaB2.commands.run('cat from-b.txt')).stdout, 'written through B');
  // A snapshot taken through B (by A), stored in the object store, then deleted.
  const snap = await viaB2.createSnapshot();
  const snapStored = await storedOf('machine_snapshots', snap.snapshotId);
  assert.deepEqual(await heldBy(snap.snapshotId), snapStored);
  assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId, on(b)), true);
  assert.deepEqual(await heldBy(snap.snapshotId), []);
  assert.equal(await Sandbox.kill(id, on(b)), true);
  assert.equal(await leaseOf(id), null);
  assert.equal(await stateOf(id), null, 'its row is gone');
  await assert.rejects(back.getInfo(), SandboxNotFoundError);
  assert.equal((await Sandbox.list(on(b)).nextItems()).some((s) => s.sandboxId === id), false);
  id = '';

  // Collection deletes the blobs of the machine's hibernations and of the snapshot: nothing names them.
  const keys = async () => new Set((await cluster.s3.keys(`${PREFIX}/sha256/`)).map((k) => `sha256:${k.slice(k.lastIndexOf('/') + 1)}`));
  const before = await keys();
  for (const d of [...stored, ...snapStored]) assert.ok(before.has(d), `${d} is there before collection`);
  await a.sb.gc();
  const left = await keys();
  for (const d of [...stored, ...snapStored]) assert.equal(left.has(d), false, `${d} was deleted`);
  assert.deepEqual([...left], [], 'no blob is left: this cluster has no layers');
  assert.deepEqual(await sql('SELECT owner, digest FROM cluster_machine_blobs'), []);
  assert.deepEqual(await sql('SELECT digest FROM cluster_blob_deletions'), []);
});
