import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { request } from 'node:http';
import { connect } from 'node:net';
import { after, before, describe, test } from 'node:test';
import type { Service } from '@shellbase/protocol';
import pino from 'pino';
import { startServer } from '@shellbase/server';
import { Shellbase } from '@shellbase/sdk';
import { sleep, startTestServer, type TestServer } from './harness.ts';

/** A python3 server: GET / says hello, /sse streams three events, /ws echoes raw bytes after a WebSocket handshake, /db counts rows. */
const APP = String.raw`
import base64, hashlib, http.server, socketserver, sqlite3, sys, time
db = sqlite3.connect('/root/rows.db', check_same_thread=False)
db.execute('create table if not exists rows (v text)')
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    def log_message(self, *a): sys.stderr.write('request %s\n' % self.path)
    def send(self, body, type='text/plain'):
        self.send_response(200); self.send_header('content-type', type); self.send_header('content-length', str(len(body))); self.end_headers(); self.wfile.write(body)
    def do_GET(self):
        if self.path == '/sse':
            self.send_response(200); self.send_header('content-type', 'text/event-stream'); self.end_headers()
            for i in range(3):
                self.wfile.write(b'data: tick %d\n\n' % i); self.wfile.flush(); time.sleep(0.2)
            self.close_connection = True
        elif self.path == '/ws':
            key = self.headers['sec-websocket-key']
            accept = base64.b64encode(hashlib.sha1((key + '258EAFA5-E914-47DA-95CA-C5AB0DC85B11').encode()).digest()).decode()
            self.send_response(101); self.send_header('upgrade', 'websocket'); self.send_header('connection', 'Upgrade')
            self.send_header('sec-websocket-accept', accept); self.end_headers(); self.wfile.flush()
            while True:
                b = self.rfile.read1(4096)
                if not b: break
                self.wfile.write(b); self.wfile.flush()
            self.close_connection = True
        elif self.path == '/db':
            self.send(str(db.execute('select count(*) from rows').fetchone()[0]).encode())
        else:
            self.send(b'hello from ' + self.path.encode())
    def do_POST(self):
        db.execute('insert into rows values (?)', (self.rfile.read(int(self.headers['content-length'])).decode(),)); db.commit()
        self.send(b'ok')
class S(socketserver.ThreadingMixIn, http.server.HTTPServer): daemon_threads = True
print('listening', flush=True)
import os
S(('0.0.0.0', int(os.environ.get('PORT', '8000'))), H).serve_forever()
`;

describe('services: woken by requests, asleep when idle', () => {
  let t: TestServer;
  let gateway: URL;
  before(async () => {
    t = await startTestServer();
    gateway = new URL(t.server.gatewayUrl);
    await t.sb.context('web').files.write('/root/app.py', APP);
  });
  after(async () => { await t?.close(); });

  /** A request to the gateway as `{token}.localhost` (by Host header) or by the /s/{token}/ path. */
  const get = (svc: Service, path: string, opts: { byPath?: boolean; method?: string; body?: string } = {}) =>
    new Promise<{ status: number; text: string; headers: Record<string, unknown> }>((resolve, reject) => {
      const host = new URL(svc.url).host;
      const p = opts.byPath ? `${new URL(svc.pathUrl).pathname.replace(/\/$/, '')}${path}` : path;
      const req = request({ host: gateway.hostname, port: gateway.port, path: p, method: opts.method ?? 'GET', headers: opts.byPath ? {} : { host }, agent: false }, (res) => {
        let text = '';
        res.on('data', (c) => { text += c; });
        res.on('end', () => resolve({ status: res.statusCode!, text, headers: res.headers }));
      });
      req.on('error', reject);
      req.end(opts.body);
    });
  const state = async (name: string) => (await t.sb.context('web').services.get(name)).state;

  test('defining runs nothing; the first request wakes it, by host name or by path', async () => {
    const svc = await t.sb.context('web').services.create({ name: 'app', command: 'python3 /root/app.py', port: 8000 });
    assert.match(svc.url, /^http:\/\/[a-z2-7]{26}\.localhost:\d+\/$/);
    assert.equal(svc.state, 'sleeping');
    const r = await get(svc, '/hi');
    assert.deepEqual([r.status, r.text], [200, 'hello from /hi']);
    assert.equal((await get(svc, '/there', { byPath: true })).text, 'hello from /there');
    assert.equal(await state('app'), 'running');
    assert.match(await t.sb.context('web').services.logs('app'), /request \/hi/);
  });

  test('20 requests arriving during a start are all answered', async () => {
    const svc = await t.sb.context('web').services.create({ name: 'burst', command: 'sleep 0.5; python3 /root/app.py', port: 8001, env: { PORT: '8001' } });
    const answers = await Promise.all(Array.from({ length: 20 }, (_, i) => get(svc, `/${i}`)));
    assert.deepEqual(answers.map((a) => a.text), Array.from({ length: 20 }, (_, i) => `hello from /${i}`));
  });

  test('server-sent events stream through; a WebSocket upgrade becomes a byte pipe', async () => {
    const svc = await t.sb.context('web').services.get('app');
    const chunks: number[] = [];
    const started = Date.now();
    await new Promise<void>((resolve, reject) => {
      const req = request({ host: gateway.hostname, port: gateway.port, path: '/sse', headers: { host: new URL(svc.url).host }, agent: false }, (res) => {
        assert.equal(res.headers['content-type'], 'text/event-stream');
        res.on('data', (c: Buffer) => { if (c.toString().includes('tick')) chunks.push(Date.now() - started); });
        res.on('end', () => resolve());
      });
      req.on('error', reject);
      req.end();
    });
    assert.equal(chunks.length, 3, 'each event arrives on its own, not buffered into one');
    const key = createHash('sha1').update(String(Math.random())).digest('base64').slice(0, 24);
    const echoed = await new Promise<string>((resolve, reject) => {
      const s = connect(Number(gateway.port), gateway.hostname, () => {
        s.write(`GET /ws HTTP/1.1\r\nHost: ${new URL(svc.url).host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: ${key}\r\nSec-WebSocket-Version: 13\r\n\r\n`);
      });
      let got = '';
      s.on('data', (c) => {
        got += c.toString('latin1');
        if (got.includes('\r\n\r\n') && !got.includes('PING')) s.write('PING-FRAME-BYTES');
        if (got.includes('PING-FRAME-BYTES')) { s.destroy(); resolve(got); }
      });
      s.on('error', reject);
    });
    assert.match(echoed, /^HTTP\/1\.1 101/);
    assert.match(echoed, /sec-websocket-accept: /i);
  });

  test('idle services sleep, their writes commit, and the next request wakes them', async () => {
    const ctx = t.sb.context('web');
    const svc = await ctx.services.create({ name: 'db', command: 'python3 /root/app.py', port: 8002, env: { PORT: '8002' }, idleTimeoutMs: 300 });
    assert.equal((await get(svc, '/', { method: 'POST', body: 'one' })).text, 'ok');
    assert.equal((await get(svc, '/', { method: 'POST', body: 'two' })).text, 'ok');
    for (let i = 0; i < 100 && (await state('db')) !== 'sleeping'; i++) await sleep(50);
    assert.equal(await state('db'), 'sleeping');
    const versions = await ctx.versions();
    assert.equal(versions[0].cause.kind, 'service', 'its writes are a version of the context');
    assert.equal(typeof versions[0].cause.exitCode, 'number', 'with the exit code of the run');
    const q = await ctx.exec(`python3 -c "import sqlite3; print(sqlite3.connect('/root/rows.db').execute('select count(*) from rows').fetchone()[0])"`, { commit: 'never' });
    assert.equal(q.stdout, '2\n', 'a query sees the rows');
    assert.equal((await get(svc, '/db')).text, '2', 'and so does the service, woken again');
    await ctx.services.stop('db');
    assert.equal(await state('db'), 'sleeping');
    const byKind = (await t.sb.usage({ groupBy: 'kind' })).items;
    const svcUsage = byKind.find((i) => i.key === 'service');
    assert.ok(svcUsage && svcUsage.serviceSeconds > 0 && svcUsage.queries === 0, `service runs are metered: ${JSON.stringify(byKind)}`);
  });

  test('a service is billed for its activity, not for its idle tail before it sleeps', async () => {
    const { apiKey } = await t.sb.tenants.create('billing');
    const sb = new Shellbase({ url: t.server.url, apiKey });
    await sb.context('bill').files.write('/root/app.py', APP);
    const svc = await sb.context('bill').services.create({ name: 'once', command: 'python3 /root/app.py', port: 8000, idleTimeoutMs: 2000 });
    assert.equal((await get(svc, '/hi')).text, 'hello from /hi');
    for (let i = 0; i < 200 && (await sb.context('bill').services.get('once')).state !== 'sleeping'; i++) await sleep(50);
    const u = (await sb.usage({ groupBy: 'kind' })).items.find((i) => i.key === 'service')!;
    assert.ok(u.serviceSeconds >= 2, `wall time includes the idle tail: ${JSON.stringify(u)}`);
    assert.ok(u.serviceActiveSeconds > 0 && u.serviceActiveSeconds < u.serviceSeconds - 1.5,
      `billed: the start and the one request, not the 2 s idle tail: ${JSON.stringify(u)}`);
    const metrics = await (await fetch(`${t.server.url}/metrics`)).text();
    assert.match(metrics, /shellbase_idle_seconds_total\{kind="service"\} [1-9]/);
  });

  test('a crashing service and one that never opens its port answer 503 with their last log lines', async () => {
    const ctx = t.sb.context('web');
    const crash = await ctx.services.create({ name: 'crash', command: 'echo "boom: missing config" >&2; exit 3', port: 8003 });
    const r = await get(crash, '/');
    assert.equal(r.status, 503);
    assert.match(JSON.parse(r.text).error.details.logs, /boom: missing config/);
    const mute = await ctx.services.create({ name: 'mute', command: 'echo waiting; sleep 30', port: 8004, startTimeoutMs: 500 });
    const m = await get(mute, '/');
    assert.equal(m.status, 503);
    assert.match(JSON.parse(m.text).error.message, /nothing listened on port 8004/);
    assert.equal(await state('mute'), 'sleeping', 'the failed start was stopped');
  });

  test('a tenant runs at most its runningServices quota at once (429 at the gateway)', async () => {
    const key = (await t.http('POST', '/v1/tenants', { body: { name: 'one-svc', quotas: { runningServices: 1 } } })).json.apiKey;
    const mk = (name: string, port: number) => t.http('POST', '/v1/contexts/q/services', { key, body: { name, command: `python3 -m http.server ${port}`, port } });
    const [a, b] = [(await mk('a', 8000)).json as Service, (await mk('b', 8001)).json as Service];
    assert.equal((await get(a, '/')).status, 200);
    const refused = await get(b, '/');
    assert.equal(refused.status, 429);
    assert.equal(JSON.parse(refused.text).error.details.quota, 'runningServices');
    await t.http('POST', '/v1/contexts/q/services/a/stop', { key });
    assert.equal((await get(b, '/')).status, 200, 'accepted again once the first sleeps');
  });

  test("a context's queries reach its services at 127.0.0.1 (waking them); other contexts' do not", async () => {
    const web = t.sb.context('web');
    await web.services.stop('db');
    const r = await web.exec('curl -sS 127.0.0.1:8002/db', { commit: 'never' });
    assert.deepEqual([r.exitCode, r.stdout], [0, '2'], r.stderr);
    assert.equal(await state('db'), 'running', 'the query woke it');
    const other = await t.sb.context('elsewhere').exec('curl -sS -m 2 127.0.0.1:8002/db; echo " rc=$?"', { commit: 'never' });
    assert.match(other.stdout, /rc=7\n$/, 'connection refused: no such service there');
    const plain = await t.sb.context('elsewhere').exec('test -e /tmp/.shellbase && echo forwarded || echo plain', { commit: 'never', network: { egress: 'none' } });
    assert.equal(plain.stdout, 'plain\n', 'a context without services (and a query without egress) gets no forwarder');
  });

  test('a server restart puts running services to sleep with their writes committed', async () => {
    const svc = await t.sb.context('restart').services.create({ name: 'w', command: 'echo started >> /root/runs; python3 -m http.server 8000', port: 8000 });
    assert.equal((await get(svc, '/')).status, 200);
    const { config } = t;
    await t.server.close();
    t.server = await startServer(config, pino({ level: 'silent' }));
    t.sb = new Shellbase({ url: t.server.url, apiKey: t.key });
    gateway = new URL(t.server.gatewayUrl);
    const again = await t.sb.context('restart').services.get('w');
    assert.equal(again.state, 'sleeping');
    assert.equal(again.url, svc.url.replace(/:\d+\/$/, `:${gateway.port}/`), 'same token, the new gateway port');
    assert.equal((await t.sb.context('restart').exec('cat /root/runs', { commit: 'never' })).stdout, 'started\n', 'its writes were committed on shutdown');
    assert.equal((await get(again, '/')).status, 200, 'and it wakes again');
  });

  test('bad input: ports, names, unknown tokens and deleted services', async () => {
    const ctx = (body: unknown) => t.http('POST', '/v1/contexts/web/services', { body });
    assert.equal((await ctx({ name: 'p', command: 'true', port: 0 })).status, 400);
    assert.equal((await ctx({ name: 'p', command: 'true', port: 70000 })).status, 400);
    assert.equal((await ctx({ name: 'p', command: [], port: 80 })).status, 400);
    assert.equal((await ctx({ name: 'app', command: 'true', port: 80 })).status, 409, 'a name clash');
    const port = await ctx({ name: 'other', command: 'true', port: 8000 });
    assert.deepEqual([port.status, port.json.error.details.service], [409, 'app'], 'a port clash within the context');
    const unknown = await get({ url: `http://${'a'.repeat(26)}.localhost:1/`, pathUrl: '' } as Service, '/');
    assert.equal(unknown.status, 404);
    assert.doesNotMatch(unknown.text, /app|web/);
    const svc = await t.sb.context('web').services.get('app');
    await t.sb.context('web').services.remove('app');
    assert.equal((await get(svc, '/')).status, 404, 'a deleted service is gone from the gateway');
    assert.equal((await t.http('GET', '/v1/contexts/web/services/app')).status, 404);
  });
});
