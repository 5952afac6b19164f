import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHmac } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { request } from 'node:https';
import { connect } from 'node:tls';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { startCluster, type ClusterWorkerProcess as Worker, type TestCluster } from './cluster-harness.ts';
import { sleep } from './harness.ts';

// Two workers serving HTTPS (one self-signed certificate for 127.0.0.1, which is also the CA they
// check each other against), over one Postgres and one S3 API, with mutual TLS between them: what
// passes between workers is proven with the cluster secret and comes with a worker's client
// certificate, is refused without either, and is fenced by the lease epoch.
let cluster: TestCluster;
let a: Worker;
let b: Worker;
let certDir = '';
let ca: Buffer;
/** The workers' certificate and key: what a worker shows as a client. */
let worker: { cert: Buffer; key: Buffer };
let adminKey = '';

/** The fields of the API's answers these tests read. */
interface Body { pathUrl: string; state: string; error: { code: string; message: string } }
interface Answer { status: number; text: string; json: () => Body }

/** One HTTPS request to a worker (its API unless `base` says otherwise), checked against the test CA. */
function call(base: string, method: string, p: string, options: { body?: unknown; headers?: Record<string, string>; key?: string | null; asWorker?: boolean } = {}): Promise<Answer> {
  const url = new URL(p, base);
  const body = options.body === undefined ? undefined : Buffer.from(JSON.stringify(options.body));
  const key = options.key === undefined ? adminKey : options.key;
  return new Promise((resolve, reject) => {
    const req = request(url, {
      method, ca, ...(options.asWorker ? worker : {}),
      headers: { ...(key ? { authorization: `Bearer ${key}` } : {}), ...(body ? { 'content-type': 'application/json', 'content-length': String(body.length) } : {}), ...options.headers },
    }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => { text += c; });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text, json: () => JSON.parse(text) as Body }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

const exec = async (w: Worker, context: string, command: string) => {
  const r = await call(w.url, 'POST', `/v1/contexts/${context}/exec`, { body: { command, commit: 'never' } });
  assert.equal(r.status, 200, r.text);
  return JSON.parse(r.text) as { stdout: string; stderr: string; exitCode: number };
};

/** A service that answers every GET with an id of its run, and leaves a file named after it (its run's write). */
const ID_SERVER = `import http.server, os, random
me = str(random.randrange(10**12))
open('/root/run-' + me, 'w').write(me)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write((str(sorted(k.lower() for k in self.headers.keys())) if self.path == '/headers' else me).encode())
http.server.HTTPServer(('127.0.0.1', int(os.environ.get('PORT', '8000'))), H).serve_forever()
`;

async function defineService(context: string, name: string, extra: Record<string, unknown> = {}): Promise<{ token: string }> {
  const r = await call(a.url, 'POST', `/v1/contexts/${context}/services`, { body: { name, command: ['python3', '-c', ID_SERVER], port: 8000, ...extra } });
  assert.equal(r.status, 201, r.text);
  return { token: new URL(r.json().pathUrl).pathname.split('/')[2] };
}

/** An upgrade to `shellbase-tcp` on a worker's API; once switched, one HTTP/1.0 GET through it; everything read back. */
const upgrade = (w: Worker, p: string, headers: string[], asWorker = false) => new Promise<string>((resolve, reject) => {
  const s = connect({ host: '127.0.0.1', port: Number(new URL(w.url).port), ca, ...(asWorker ? worker : {}) }, () => {
    s.write([`GET ${p} HTTP/1.1`, `Host: ${new URL(w.url).host}`, 'Connection: Upgrade', 'Upgrade: shellbase-tcp', ...headers, '', ''].join('\r\n'));
  });
  let text = '';
  let sent = false;
  s.on('data', (c: Buffer) => {
    text += c.toString();
    // One request only: bytes written after the service has answered and closed would reach a
    // socket the worker closes unread, and come back as a reset.
    if (!sent && text.startsWith('HTTP/1.1 101') && text.includes('\r\n\r\n')) {
      sent = true;
      s.write('GET / HTTP/1.0\r\n\r\n');
    }
  });
  s.on('end', () => resolve(text));
  s.on('error', reject);
});

const viaGateway = async (w: Worker, token: string, headers: Record<string, string> = {}) => call(w.gatewayUrl, 'GET', `/s/${token}/`, { key: null, headers });

/** The cluster secret as the workers hold it (stored in Postgres by the first one). */
const secret = async () => (await cluster.sql<{ value: string }>(`SELECT value FROM cluster_secrets WHERE name = 'forward'`))[0].value;
const proof = (key: string, method: string, host: string, p: string, at = Date.now(), worker = 'w_test') =>
  `v1 ${worker} ${at} ${createHmac('sha256', key).update(['v1', method, host.toLowerCase(), p, worker, String(at)].join('\n')).digest('base64url')}`;

before(async () => {
  certDir = mkdtempSync(path.join(tmpdir(), 'shellbase-cluster-tls-'));
  execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1', '-subj', '/CN=127.0.0.1',
    '-addext', 'subjectAltName=IP:127.0.0.1', '-keyout', path.join(certDir, 'key.pem'), '-out', path.join(certDir, 'cert.pem')], { stdio: 'ignore' });
  ca = readFileSync(path.join(certDir, 'cert.pem'));
  worker = { cert: ca, key: readFileSync(path.join(certDir, 'key.pem')) };
  const tls = {
    SHELLBASE_TLS_CERT: path.join(certDir, 'cert.pem'), SHELLBASE_TLS_KEY: path.join(certDir, 'key.pem'), SHELLBASE_TLS_CA: path.join(certDir, 'cert.pem'),
    SHELLBASE_TLS_CLIENT_AUTH: '1',
  };
  cluster = await startCluster();
  a = await cluster.start('a', tls);
  b = await cluster.start('b', tls);
  adminKey = readFileSync(path.join(a.home, 'admin.key'), 'utf8').trim();
});

after(async () => {
  for (const w of cluster?.workers ?? []) if (w.child.signalCode === null && w.child.exitCode === null) w.child.kill('SIGCONT');
  await cluster?.stop();
  if (certDir) rmSync(certDir, { recursive: true, force: true });
});

test('cluster security: workers serve the API and the gateway over HTTPS and advertise https URLs', async () => {
  assert.match(a.url, /^https:\/\/127\.0\.0\.1:\d+$/);
  assert.match(a.gatewayUrl, /^https:\/\//);
  assert.equal((await call(a.url, 'GET', '/healthz', { key: null })).status, 200);
  const rows = await cluster.sql<{ address: string; gateway: string }>('SELECT address, gateway FROM cluster_workers');
  assert.ok(rows.every((r) => r.address.startsWith('https://') && r.gateway.startsWith('https://')), JSON.stringify(rows));
  const plain = await fetch(`${a.url.replace('https:', 'http:')}/healthz`).then((r) => r.status, () => 'refused');
  assert.notEqual(plain, 200, 'plain HTTP is not served');
});

test('cluster security: `shellbase admin-key --metadata postgres://…` makes a working admin key from the shared metadata', async () => {
  const out = execFileSync(process.execPath, [path.resolve('packages/cli/dist/main.js'), 'admin-key', '--metadata', cluster.database], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  const key = out.trim();
  assert.match(key, /^sb_[\w-]{32}$/);
  for (const w of [a, b]) {
    const r = await call(w.url, 'GET', '/v1/tenants', { key });
    assert.equal(r.status, 200, r.text);
  }
});

test('cluster security: a request marked as forwarded without a valid proof is refused (API, gateway, internal tunnel)', async () => {
  const { token } = await defineService('sec', 'id');
  const key = await secret();
  assert.equal(key.length, 64, '32 random bytes, as hex');
  const host = new URL(a.url).host;
  const forged = { 'x-shellbase-forwarded': 'v1 w_x 1 AAAA' };
  for (const r of [
    await call(a.url, 'GET', '/v1/contexts', { headers: forged }),
    await call(a.url, 'GET', '/v1/contexts', { headers: { 'x-shellbase-forwarded': proof('not-the-secret', 'GET', host, '/v1/contexts') } }),
    await call(a.url, 'GET', '/v1/contexts', { headers: { 'x-shellbase-forwarded': proof(key, 'GET', host, '/v1/contexts', Date.now() - 120_000) } }),
    await call(a.url, 'GET', '/v1/contexts', { headers: { 'x-shellbase-forwarded': proof(key, 'GET', host, '/v1/tenants') } }),
    await viaGateway(a, token, forged),
  ]) {
    assert.equal(r.status, 401, r.text);
    assert.equal(r.json().error.code, 'unauthorized');
    assert.match(r.json().error.message, /x-shellbase-forwarded/);
  }
  // A proof made with the secret is accepted over a connection with a worker's client certificate
  // (mutual TLS); the caller's key is still checked by the worker that serves it.
  const good = () => ({ 'x-shellbase-forwarded': proof(key, 'GET', host, '/v1/contexts') });
  const noCert = await call(a.url, 'GET', '/v1/contexts', { headers: good() });
  assert.equal(noCert.status, 401, 'a valid proof without a client certificate is refused');
  assert.match(noCert.json().error.message, /client certificate/);
  assert.equal((await call(a.url, 'GET', '/v1/contexts', { headers: good(), asWorker: true })).status, 200);
  assert.equal((await call(a.url, 'GET', '/v1/contexts', { headers: good(), key: null, asWorker: true })).status, 401, 'no key: refused even with a proof');
  assert.equal((await call(a.url, 'GET', '/v1/contexts')).status, 200, 'clients need no certificate');
  // The internal tunnel (workers only: a proof, no key) refuses a caller without one, and opens with one.
  const tunnelPath = `/internal/services/${token}/connect`;
  assert.match(await upgrade(a, tunnelPath, []), /^HTTP\/1\.1 401/);
  assert.match(await upgrade(a, tunnelPath, [`x-shellbase-forwarded: ${proof('not-the-secret', 'GET', host, tunnelPath)}`]), /^HTTP\/1\.1 401/);
  assert.match(await upgrade(a, tunnelPath, [`x-shellbase-forwarded: ${proof(key, 'GET', host, tunnelPath)}`]), /^HTTP\/1\.1 401/, 'no client certificate');
  const opened = await upgrade(a, tunnelPath, [`x-shellbase-forwarded: ${proof(key, 'GET', host, tunnelPath)}`], true);
  assert.match(opened, /^HTTP\/1\.1 101[^]*HTTP\/1\.0 200/, opened);
  assert.equal((await call(a.url, 'POST', '/v1/contexts/sec/services/id/stop')).status, 200);
});

test('cluster security: forwarded requests work over TLS: gateway, TCP tunnel, stop and logs reach the worker running the service', async () => {
  const { token } = await defineService('web', 'id', { share: 'tenant' });
  const first = await viaGateway(a, token);
  assert.equal(first.status, 200, `${first.text}\n${readFileSync(path.join(a.home, 'services', `${token}.log`), 'utf8')}`);
  const second = await viaGateway(b, token);
  assert.equal(second.text, first.text, "B's gateway passes the request to A, where it runs");
  const seen = await call(b.gatewayUrl, 'GET', `/s/${token}/headers`, { key: null });
  assert.equal(seen.status, 200, seen.text);
  assert.doesNotMatch(seen.text, /x-shellbase-forwarded/, 'the proof stops at the gateway');
  const [lease] = await cluster.sql<{ address: string }>(`SELECT w.address FROM cluster_leases l JOIN cluster_workers w ON w.id = l.worker_id WHERE l.key = '${token}'`);
  assert.equal(lease.address, a.url);
  // A TCP tunnel through B's API (the caller's key, checked again on A) reaches the run on A.
  const tunnel = await upgrade(b, '/v1/contexts/web/services/id/connect', [`Authorization: Bearer ${adminKey}`]);
  assert.match(tunnel, /^HTTP\/1\.1 101[^]*HTTP\/1\.0 200/, tunnel);
  assert.ok(tunnel.endsWith(first.text));
  // logs through B are A's (the run's start line); stop through B stops it on A.
  const logs = await call(b.url, 'GET', '/v1/contexts/web/services/id/logs');
  assert.equal(logs.status, 200, logs.text);
  assert.match(logs.text, /--- shellbase: starting/);
  assert.equal((await call(b.url, 'GET', '/v1/contexts/web/services/id/logs', { key: 'sk_wrong' })).status, 401, "the caller's key is checked");
  const stopped = await call(b.url, 'POST', '/v1/contexts/web/services/id/stop');
  assert.equal(stopped.status, 200, stopped.text);
  assert.equal(stopped.json().state, 'sleeping');
  assert.deepEqual(await cluster.sql(`SELECT key FROM cluster_leases WHERE key = '${token}'`), [], 'A gave its lease up');
});

test("cluster security: a sandbox on B reaches its context's service and a linked service running on A", async () => {
  const token = new URL((await call(a.url, 'GET', '/v1/contexts/web/services/id')).json().pathUrl).pathname.split('/')[2];
  const id = (await viaGateway(a, token)).text;
  const own = await exec(b, 'web', 'curl -sS -m 20 127.0.0.1:8000/');
  assert.equal(own.stdout, id, own.stderr);
  const linked = await exec(b, 'jobs', 'curl -sS -m 20 http://id.web.internal:8000/');
  assert.equal(linked.stdout, id, linked.stderr);
  const [lease] = await cluster.sql<{ address: string }>(`SELECT w.address FROM cluster_leases l JOIN cluster_workers w ON w.id = l.worker_id WHERE l.key = '${token}'`);
  assert.equal(lease.address, a.url, 'still one run, on A');
  assert.equal((await call(a.url, 'POST', '/v1/contexts/web/services/id/stop')).status, 200);
});

test('cluster security: a stale owner is fenced by the lease epoch: paused past its heartbeat, taken over, it gives up and its writes are refused', async () => {
  const { token } = await defineService('fence', 'f');
  const first = await viaGateway(a, token);
  assert.equal(first.status, 200, `${first.text}\n${readFileSync(path.join(a.home, 'services', `${token}.log`), 'utf8')}`);
  const epoch = async () => (await cluster.sql<{ address: string; epoch: string }>(`SELECT w.address, l.epoch FROM cluster_leases l JOIN cluster_workers w ON w.id = l.worker_id WHERE l.key = '${token}'`))[0];
  const before = await epoch();
  assert.equal(before.address, a.url);
  let secondId = '';
  a.child.kill('SIGSTOP');
  try {
    // Three heartbeats (300 ms each in the harness) without a beat: A is taken for gone.
    for (;;) {
      const [row] = await cluster.sql<{ lapsed: boolean }>(`SELECT heartbeat_at < now() - interval '900 milliseconds' AS lapsed FROM cluster_workers WHERE address = '${a.url}'`);
      if (row?.lapsed) break;
      await sleep(100);
    }
    const second = await viaGateway(b, token);
    assert.equal(second.status, 200, second.text);
    assert.notEqual(second.text, first.text, 'a second run, on B');
    secondId = second.text;
  } finally {
    a.child.kill('SIGCONT');
  }
  const after = await epoch();
  assert.equal(after.address, b.url);
  assert.ok(Number(after.epoch) > Number(before.epoch), `the epoch moved on: ${before.epoch} → ${after.epoch}`);
  // A wakes, finds at its next heartbeat that the lease is B's, stops its run, and its commit is refused.
  const logFile = path.join(a.home, 'services', `${token}.log`);
  while (!/was taken over: its work is not committed/.test(readFileSync(logFile, 'utf8'))) await sleep(100);
  assert.equal((await epoch()).address, b.url, "A's giving up leaves B's lease alone");
  const unnamed = await cluster.sql<{ n: string }>('SELECT count(*) AS n FROM cluster_layer_blobs b WHERE NOT EXISTS (SELECT 1 FROM layers l WHERE l.id = b.layer_id)');
  assert.equal(Number(unnamed[0].n), 0, "the refused run's uploaded layer is dropped (its blob deleted after the grace period)");
  assert.equal((await viaGateway(a, token)).text, secondId, "A's gateway now passes requests to B");
  assert.equal((await call(b.url, 'POST', '/v1/contexts/fence/services/f/stop')).status, 200);
  const files = (await exec(b, 'fence', 'ls /root')).stdout.split('\n').filter((f) => f.startsWith('run-'));
  assert.deepEqual(files, [`run-${secondId}`], "B's run's writes are committed, the stale run's on A are not");
});
