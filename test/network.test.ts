import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer as createHttpServer, request, type Server } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { connect, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { Service } from '@shellbase/protocol';
import { Shellbase } from '@shellbase/sdk';
import { debianRepository } from './debian-repo.ts';
import { sleep, startTestServer, type TestServer } from './harness.ts';

/**
 * The egress enforcement point and services over TCP, against real sandboxes.
 * 127.0.0.2 stands for the internet: an HTTP and an HTTPS server listen there,
 * the server lets that one address through (SHELLBASE_EGRESS_ALLOW_CIDRS) and
 * maps test names to it (SHELLBASE_EGRESS_HOSTS); nothing leaves the host.
 */
const UPSTREAM = '127.0.0.2';
const HOSTS = {
  'api.example.test': UPSTREAM, 'other.example.test': UPSTREAM, 'a.wild.example.test': UPSTREAM,
  'rebind.example.test': '127.0.0.1', 'metadata.example.test': '169.254.169.254',
};

/** A python3 TCP echo server (a stand-in for a database): each line comes back upper-cased. */
const ECHO = String.raw`
import socketserver
class H(socketserver.StreamRequestHandler):
    def handle(self):
        for line in self.rfile:
            self.wfile.write(line.upper()); self.wfile.flush()
class S(socketserver.ThreadingMixIn, socketserver.TCPServer): allow_reuse_address = True; daemon_threads = True
S(('127.0.0.1', 5432), H).serve_forever()
`;

/** A python3 HTTP service that fetches from the upstream (through the proxy its environment names) and shows what it was sent. */
const FETCHER = String.raw`
import http.server, json, os, urllib.request
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        if self.path == '/fetch':
            body = urllib.request.urlopen(os.environ['UPSTREAM']).read()
        else:
            body = json.dumps({k.lower(): v for k, v in self.headers.items()}).encode()
        self.send_response(200); self.send_header('content-length', str(len(body))); self.end_headers(); self.wfile.write(body)
http.server.ThreadingHTTPServer(('127.0.0.1', 8080), H).serve_forever()
`;

/** `curl -s -w ' %{http_code}\n'` output of one-line bodies: [body, status] pairs. */
function pairs(stdout: string): [string, string][] {
  const lines = stdout.trim().split('\n');
  const out: [string, string][] = [];
  for (let i = 0; i + 1 < lines.length; i += 2) out.push([lines[i], lines[i + 1].trim()]);
  return out;
}

describe('network: egress under a policy, services over TCP, keyed access', () => {
  let t: TestServer;
  let http: Server;
  let https: Server;
  let port = 0;
  let tlsPort = 0;
  let certDir = '';
  let apiPort = 0;

  before(async () => {
    certDir = mkdtempSync(path.join(tmpdir(), 'shellbase-tls-'));
    execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1', '-subj', '/CN=api.example.test',
      '-addext', 'subjectAltName=DNS:api.example.test', '-keyout', path.join(certDir, 'key.pem'), '-out', path.join(certDir, 'cert.pem')], { stdio: 'ignore' });
    const repo = debianRepository(certDir);
    const answer = (req: { url?: string; method?: string }, res: import('node:http').ServerResponse) => {
      const big = /^\/big\/(\d+)$/.exec(req.url ?? '');
      if (big) { res.end(Buffer.alloc(Number(big[1]), 97)); return; }
      const file = /^\/repo\/(?:\.\/)?([\w.+-]+)$/.exec(req.url ?? '');
      if (file) {
        const body = repo.get(file[1]);
        res.writeHead(body ? 200 : 404).end(body ?? '');
        return;
      }
      res.end(`upstream says hi to ${req.method} ${req.url}\n`);
    };
    http = createHttpServer(answer);
    https = createHttpsServer({ key: readFileSync(path.join(certDir, 'key.pem')), cert: readFileSync(path.join(certDir, 'cert.pem')) }, answer);
    await new Promise<void>((r) => http.listen(0, UPSTREAM, r));
    await new Promise<void>((r) => https.listen(0, UPSTREAM, r));
    port = (http.address() as AddressInfo).port;
    tlsPort = (https.address() as AddressInfo).port;
    t = await startTestServer({
      egress: { default: { egress: 'public' }, allowCidrs: [`${UPSTREAM}/32`], hosts: HOSTS, maxPerSandbox: 8, maxPerTenant: 1024, logDays: 7 },
    });
    apiPort = Number(new URL(t.server.url).port);
    await t.sb.context('net').files.write('/root/ca.pem', readFileSync(path.join(certDir, 'cert.pem')));
  });
  after(async () => {
    await t?.close();
    http?.close();
    https?.close();
    if (certDir) rmSync(certDir, { recursive: true, force: true });
  });

  const sh = (ctx: string, command: string, network?: { egress: 'none' } | { egress: 'public' } | { egress: 'allow'; domains: string[] }) =>
    t.sb.context(ctx).exec(command, { commit: 'never', timeoutMs: 30_000, ...(network ? { network } : {}) });

  test('public: curl over HTTP and HTTPS, Python, git-style SOCKS; bytes metered per query and in usage', async () => {
    const r = await sh('net', `curl -sS http://api.example.test:${port}/plain && curl -sS --cacert /root/ca.pem https://api.example.test:${tlsPort}/tls`
      + ` && python3 -c "import urllib.request; print(urllib.request.urlopen('http://api.example.test:${port}/py').read().decode(), end='')"`
      + ` && curl -sS -x socks5h://127.0.0.1:1080 http://api.example.test:${port}/socks`);
    assert.equal(r.exitCode, 0, r.stderr);
    assert.equal(r.stdout, ['/plain', '/tls', '/py', '/socks'].map((p) => `upstream says hi to GET ${p}\n`).join(''));
    assert.ok((r.usage.egressBytes ?? 0) > 0 && (r.usage.ingressBytes ?? 0) > 100, `metered: ${JSON.stringify(r.usage)}`);
    const byContext = (await t.sb.usage({ groupBy: 'context' })).items.find((i) => i.key === 'net');
    assert.ok(byContext && byContext.ingressBytes >= (r.usage.ingressBytes ?? 0), JSON.stringify(byContext));
    const metrics = await (await fetch(`${t.server.url}/metrics`)).text();
    assert.match(metrics, /shellbase_egress_bytes_total\{kind="query",direction="in"\} [1-9]/);
  });

  test('none: no proxy at all; a program resolving names itself fails at once, and nothing hangs', async () => {
    const r = await sh('net', `env | grep -ci proxy; curl -sS http://api.example.test:${port}/; python3 -c "import socket; socket.getaddrinfo('api.example.test', 80)"`, { egress: 'none' });
    assert.equal(r.timedOut, false);
    assert.match(r.stdout, /^0\n/, 'no proxy variables');
    assert.match(r.stderr, /Could not resolve host/);
    assert.match(r.stderr, /gaierror/);
    assert.equal(r.usage.egressBytes, undefined, 'a query without egress has no egress session');
  });

  test('the proxy refuses private, loopback, link-local and host addresses, after resolution, with a 403 naming the policy and host', async () => {
    const proxied = (url: string) => `curl -s -w ' %{http_code}\\n' -x http://127.0.0.1:3128 --noproxy '' ${url}`;
    const r = await sh('net', [
      proxied(`http://rebind.example.test:${port}/`), proxied('http://169.254.169.254/latest/meta-data/'), proxied('http://metadata.example.test/'),
      proxied(`http://127.0.0.1:${apiPort}/healthz`), proxied(`http://localhost:${apiPort}/healthz`), proxied('http://[::1]:80/'), proxied('http://10.1.2.3/'),
    ].join('; '));
    const answers = pairs(r.stdout);
    assert.deepEqual(answers.map(([, code]) => code), Array(7).fill('403'), r.stdout);
    assert.match(answers[0][0], /^shellbase egress refused rebind\.example\.test:\d+: rebind\.example\.test: 127\.0\.0\.1 is this host's own address$/);
    assert.match(answers[1][0], /refused 169\.254\.169\.254:80: .*169\.254\.0\.0\/16, a private, loopback, link-local or reserved range$/);
    assert.match(answers[2][0], /refused metadata\.example\.test:80: .*169\.254\.0\.0\/16/);
    assert.match(answers[4][0], /refused localhost:\d+: localhost: 127\.0\.0\.1 is this host's own address/);
    assert.match(answers[6][0], /10\.1\.2\.3 is in 10\.0\.0\.0\/8/);
    // Without the proxy, the host's ports are not there at all: the sandbox's loopback is its own.
    const direct = await sh('net', `curl -sS --noproxy '*' http://127.0.0.1:${apiPort}/healthz`);
    assert.notEqual(direct.exitCode, 0);
    assert.match(direct.stderr, /Failed to connect|Couldn't connect/);
  });

  test('allow lists: names and wildcards let through, others refused; a request may only narrow its context', async () => {
    const ctx = t.sb.context('allowed');
    await ctx.files.write('/root/ca.pem', readFileSync(path.join(certDir, 'cert.pem')));
    const set = await ctx.network.set({ egress: 'allow', domains: ['api.example.test', '*.wild.example.test'] });
    assert.deepEqual(set, { policy: { egress: 'allow', domains: ['*.wild.example.test', 'api.example.test'] }, effective: { egress: 'allow', domains: ['*.wild.example.test', 'api.example.test'] } });
    const code = (url: string) => `curl -s -w ' %{http_code}\\n' ${url}`;
    const r = await sh('allowed', [code(`http://api.example.test:${port}/`), code(`http://a.wild.example.test:${port}/`), code(`http://other.example.test:${port}/`),
      code(`http://${UPSTREAM}:${port}/`), `curl -sS --cacert /root/ca.pem https://api.example.test:${tlsPort}/ok`].join('; '));
    const answers = pairs(r.stdout.replace(/upstream says hi to GET \/ok\n$/, ''));
    assert.deepEqual(answers.map(([, c]) => c), ['200', '200', '403', '403'], r.stdout);
    assert.match(r.stdout, /upstream says hi to GET \/ok\n$/);
    assert.match(answers[3][0], /does not allow 127\.0\.0\.2$/, 'an address is not a name on the list');
    assert.match(answers[2][0], /refused other\.example\.test:\d+: the network policy \(allow \*\.wild\.example\.test, api\.example\.test\) does not allow other\.example\.test/);
    // HTTPS to a name off the list: CONNECT is refused, curl says so.
    const tls = await sh('allowed', `curl -sS --cacert /root/ca.pem https://other.example.test:${tlsPort}/`);
    assert.match(tls.stderr, /CONNECT tunnel failed, response 403|Received HTTP code 403/);

    const narrower = await sh('allowed', `curl -s -o /dev/null -w '%{http_code}' http://a.wild.example.test:${port}/`, { egress: 'allow', domains: ['api.example.test'] });
    assert.equal(narrower.stdout, '403', 'a request narrows its context');
    await assert.rejects(sh('allowed', 'true', { egress: 'public' }), (e: Error & { code?: string; status?: number }) =>
      e.code === 'forbidden' && e.status === 403 && /this request's network \(public\) is wider than the context's network policy \(allow \*\.wild\.example\.test, api\.example\.test\)/.test(e.message));

    const fork = await ctx.fork('allowed-fork');
    assert.deepEqual((await fork.network.get()).policy, set.policy, 'a fork inherits its context\'s policy');
    assert.deepEqual((await t.sb.contexts.get('allowed-fork')).network, set.policy);
    const cleared = await fork.network.clear();
    assert.deepEqual(cleared, { policy: null, effective: { egress: 'public' } });
  });

  test('bad policies are 400s that change nothing; wider than the tenant\'s is a 403 naming the limit', async () => {
    await t.sb.contexts.create({ name: 'strict' });
    for (const body of [{ egress: 'allow', domains: ['*'] }, { egress: 'allow', domains: ['*.com'] }, { egress: 'allow', domains: ['bad..name'] },
      { egress: 'allow', domains: [] }, { egress: 'everything' }, { egress: 'none', extra: true }, { egress: 'public', domains: ['a.com'] }]) {
      const r = await t.http('PUT', '/v1/contexts/strict/network', { body });
      assert.equal(r.status, 400, JSON.stringify(body));
      assert.equal(r.json.error.code, 'invalid_argument');
    }
    assert.equal((await t.http('POST', '/v1/contexts/strict/exec', { body: { command: 'true', network: { egress: 'allow', domains: ['*.com'] } } })).status, 400);
    assert.deepEqual(await t.sb.context('strict').network.get(), { policy: null, effective: { egress: 'public' } });

    const { apiKey } = await t.sb.tenants.create('narrow', undefined, { egress: 'allow', domains: ['api.example.test'] });
    const narrow = new Shellbase({ url: t.server.url, apiKey });
    await assert.rejects(narrow.context('mine').network.set({ egress: 'public' }), (e: Error & { status?: number }) =>
      e.status === 403 && /wider than the tenant's \(allow api\.example\.test\)/.test(e.message));
    const r = await narrow.context('mine').exec(`curl -s -o /dev/null -w '%{http_code} ' http://api.example.test:${port}/; curl -s -o /dev/null -w '%{http_code}' http://other.example.test:${port}/`, { commit: 'never' });
    assert.equal(r.stdout, '200 403', 'the tenant\'s policy applies to its contexts');
    // The admin narrows the tenant further: contexts' stored policies are cut down to it.
    await t.sb.tenants.setNetwork('narrow', { egress: 'none' });
    const after_ = await narrow.context('mine').exec(`env | grep -c proxy_`, { commit: 'never' });
    assert.equal(after_.stdout, '0\n');
  });

  test('the audit log lists connections, allowed and refused, with bytes and reasons', async () => {
    const log = await t.sb.context('allowed').network.log({ limit: 50 });
    const refused = log.find((c) => !c.allowed && c.host === 'other.example.test');
    assert.ok(refused && /does not allow other\.example\.test/.test(refused.reason ?? ''), JSON.stringify(log.slice(0, 5)));
    const allowed = log.find((c) => c.allowed && c.host === 'api.example.test' && c.port === tlsPort);
    assert.ok(allowed && allowed.bytesIn > 0 && allowed.bytesOut > 0 && allowed.kind === 'query', JSON.stringify(allowed));
    assert.ok(log.every((c, i) => i === 0 || c.time <= log[i - 1].time), 'newest first');
    assert.deepEqual(await t.sb.context('strict').network.log(), [], 'each context has its own');
  });

  test('connections per sandbox are capped; the next sandbox is unaffected', async () => {
    const script = String.raw`
import socket
held, codes = [], []
for i in range(12):
    s = socket.create_connection(('127.0.0.1', 3128))
    s.sendall(b'CONNECT api.example.test:${port} HTTP/1.1\r\nHost: x\r\n\r\n')
    codes.append(s.recv(200).split(b' ')[1].decode()); held.append(s)
print(' '.join(codes))
`;
    await t.sb.context('net').files.write('/root/many.py', script);
    const r = await sh('net', 'python3 /root/many.py');
    assert.equal(r.stdout.trim(), `${'200 '.repeat(8)}${'403 '.repeat(4)}`.trim(), r.stderr);
    const next = await sh('net', `curl -sS http://api.example.test:${port}/next`);
    assert.equal(next.stdout, 'upstream says hi to GET /next\n');
  });

  test('the data plane dying costs only the connections it had: it is started again and egress goes on, for sandboxes running then too', async () => {
    const before = t.server.engine.deps.egress.planePid;
    assert.ok(before, 'sbx-egress runs once a sandbox had egress');
    // A sandbox whose session was open when the plane died (as a machine's stays open for days).
    const during = sh('net', `sleep 3; curl -sS http://api.example.test:${port}/during`);
    await sleep(1000);
    process.kill(before, 'SIGKILL');
    for (let i = 0; i < 100 && t.server.engine.deps.egress.planePid === before; i++) await sleep(20);
    const r = await sh('net', `curl -sS http://api.example.test:${port}/after`);
    assert.equal(r.stdout, 'upstream says hi to GET /after\n', r.stderr);
    assert.notEqual(t.server.engine.deps.egress.planePid, before);
    const d = await during;
    assert.equal(d.stdout, 'upstream says hi to GET /during\n', `its session listens again: ${d.stderr}`);
  });

  test('services: egress under their policy; TCP from outside through a tunnel that wakes them; access "key"', async () => {
    const ctx = t.sb.context('svc');
    await ctx.files.write('/root/echo.py', ECHO);
    await ctx.files.write('/root/fetch.py', FETCHER);
    const db = await ctx.services.create({ name: 'db', command: 'python3 /root/echo.py', port: 5432, idleTimeoutMs: 400 });
    assert.equal(db.access, 'url');
    const tunnel = await ctx.services.connect('db');
    const talk = (text: string) => new Promise<string>((resolve, reject) => {
      const s = connect(tunnel.port, tunnel.host, () => s.write(`${text}\n`));
      let got = '';
      s.on('data', (c: Buffer) => { got += c; if (got.endsWith('\n')) { s.end(); resolve(got); } });
      s.on('error', reject);
    });
    assert.equal(await talk('select 1'), 'SELECT 1\n');
    for (let i = 0; i < 100 && (await ctx.services.get('db')).state !== 'sleeping'; i++) await sleep(50);
    assert.equal((await ctx.services.get('db')).state, 'sleeping', 'idle once the connection closed');
    assert.equal(await talk('woken'), 'WOKEN\n', 'the next connection wakes it');
    await tunnel.close();
    // The CLI's `shellbase connect` is the same tunnel on a local port.
    const cli = spawn(process.execPath, [path.resolve('packages/cli/dist/main.js'), 'connect', 'svc', 'db', '--local-port', '0'], {
      env: { ...process.env, SHELLBASE_URL: t.server.url, SHELLBASE_API_KEY: t.key }, stdio: ['ignore', 'pipe', 'pipe'],
    });
    const where = await new Promise<string>((resolve, reject) => {
      cli.stdout!.once('data', (c: Buffer) => resolve(c.toString().trim()));
      cli.once('exit', (code) => reject(new Error(`connect exited ${code}`)));
    });
    const [h, p] = where.split(':');
    const viaCli = await new Promise<string>((resolve, reject) => {
      const s = connect(Number(p), h, () => s.write('cli\n'));
      s.on('data', (c: Buffer) => { s.end(); resolve(c.toString()); });
      s.on('error', reject);
    });
    cli.kill('SIGINT');
    assert.equal(viaCli, 'CLI\n');
    await assert.rejects(t.sb.context('svc').services.stream('nope'), (e: Error & { status?: number }) => e.status === 404 && /service/.test(e.message));
    assert.equal((await t.http('GET', '/v1/contexts/svc/services/db/connect')).status, 400, 'without the upgrade, the path says what it is');

    const web = await ctx.services.create({
      name: 'web', command: 'python3 /root/fetch.py', port: 8080, access: 'key', env: { UPSTREAM: `http://api.example.test:${port}/from-service` },
      network: { egress: 'allow', domains: ['api.example.test'] },
    });
    assert.equal(web.access, 'key');
    const gw = new URL(t.server.gatewayUrl);
    const get = (svc: Service, p: string, key?: string) => new Promise<{ status: number; text: string }>((resolve, reject) => {
      const req = request({ host: gw.hostname, port: gw.port, path: p, headers: { host: new URL(svc.url).host, ...(key ? { authorization: `Bearer ${key}` } : {}) }, agent: false }, (res) => {
        let text = '';
        res.on('data', (c) => { text += c; });
        res.on('end', () => resolve({ status: res.statusCode!, text }));
      });
      req.on('error', reject);
      req.end();
    });
    assert.equal((await get(web, '/fetch')).status, 401, 'no key, no entry');
    const other = await t.sb.tenants.create('stranger');
    assert.equal((await get(web, '/fetch', other.apiKey)).status, 403, 'another tenant\'s key is not enough');
    const fetched = await get(web, '/fetch', t.key);
    assert.deepEqual(fetched, { status: 200, text: 'upstream says hi to GET /from-service\n' }, 'the service reached the upstream through the proxy');
    const headers = JSON.parse((await get(web, '/headers', t.key)).text) as Record<string, string>;
    assert.equal(headers.authorization, undefined, 'the gateway keeps the API key from the service');
    await ctx.services.stop('web');
    const kinds = (await ctx.network.log()).filter((c) => c.kind === 'service');
    assert.ok(kinds.some((c) => c.allowed && c.host === 'api.example.test'), JSON.stringify(kinds));
    const usage = (await t.sb.usage({ groupBy: 'kind' })).items.find((i) => i.key === 'service');
    assert.ok(usage && usage.ingressBytes > 0, `service runs meter their traffic: ${JSON.stringify(usage)}`);
  });

  test('service links: a shared service answers at SERVICE.CONTEXT.internal in the contexts it is shared with, woken; others are refused by name', async () => {
    await t.sb.context('db').files.write('/root/echo.py', ECHO);
    const pg = await t.sb.context('db').services.create({ name: 'pg', command: 'python3 /root/echo.py', port: 5432, idleTimeoutMs: 500, share: ['api'] });
    assert.deepEqual(pg.share, ['api']);
    const talk = `python3 -c "import socket; s = socket.create_connection(('pg.db.internal', 5432)); s.sendall(b'hi\\n'); print(s.recv(10).decode(), end='')"`;
    const fromApi = await sh('api', `getent hosts pg.db.internal; ${talk}`, { egress: 'none' });
    assert.equal(fromApi.exitCode, 0, fromApi.stderr);
    assert.match(fromApi.stdout, /^127\.(6[4-9]|[7-9]\d|1[01]\d|12[0-7])\.\d+\.\d+\s+pg\.db\.internal\nHI\n$/, 'a name in /etc/hosts, plain TCP, without egress');
    for (let i = 0; i < 100 && (await t.sb.context('db').services.get('pg')).state !== 'sleeping'; i++) await sleep(50);
    assert.equal((await sh('api', talk)).stdout, 'HI\n', 'woken again from sleep');

    const fromJobs = await sh('jobs', `${talk}; curl -s -w ' %{http_code}' http://pg.db.internal:5432/`);
    assert.match(fromJobs.stderr, /gaierror|Name or service not known/, 'not shared: the name does not resolve');
    assert.equal(fromJobs.stdout, 'shellbase egress refused pg.db.internal:5432: service pg of context db is not shared with context jobs\n 403', 'the proxy says why, naming the service');
    const wrongPort = await sh('api', `curl -s http://pg.db.internal:80/`);
    assert.match(wrongPort.stdout, /service pg of context db listens on port 5432, not 80/);

    const shared = await t.sb.context('db').services.share('pg', 'tenant');
    assert.equal(shared.share, 'tenant');
    assert.equal((await sh('jobs', talk)).stdout, 'HI\n', 'shared with the tenant: every context reaches it');
    const { apiKey } = await t.sb.tenants.create('outsider');
    const outsider = await new Shellbase({ url: t.server.url, apiKey }).context('jobs').exec(`curl -s http://pg.db.internal:5432/; getent hosts pg.db.internal || echo unresolved`, { commit: 'never' });
    assert.equal(outsider.stdout, 'shellbase egress refused pg.db.internal:5432: no service pg.db.internal (services answer at SERVICE.CONTEXT.internal to the contexts they are shared with)\nunresolved\n',
      'another tenant learns nothing');

    // An HTTP service of another context, reached through the proxy by name (curl uses http_proxy).
    await t.sb.context('api').files.write('/root/fetch.py', FETCHER);
    await t.sb.context('api').services.create({ name: 'web', command: 'python3 /root/fetch.py', port: 8080, share: 'tenant', env: { UPSTREAM: `http://api.example.test:${port}/via-link` } });
    const viaProxy = await sh('jobs', 'curl -sS http://web.api.internal:8080/fetch');
    assert.equal(viaProxy.stdout, 'upstream says hi to GET /via-link\n', viaProxy.stderr);
    const unshare = await t.sb.context('db').services.share('pg', null);
    assert.equal(unshare.share, undefined);
    assert.match((await sh('api', talk)).stderr, /gaierror|Name or service not known/, 'unshared again: gone from other contexts');
  });

  test('apt-get update and install work through the proxy (a Debian repository on the upstream)', async () => {
    const r = await sh('net', `echo 'deb [trusted=yes] http://api.example.test:${port}/repo ./' > /etc/apt/sources.list.d/local.list`
      + ` && apt-get update -q -o Dir::Etc::sourcelist=/etc/apt/sources.list.d/local.list -o Dir::Etc::sourceparts=- -o APT::Get::List-Cleanup=0`
      + ' && apt-get install -y -q shellbase-hello && shellbase-hello');
    assert.equal(r.exitCode, 0, r.stdout.slice(-2000) + r.stderr.slice(-2000));
    assert.match(r.stdout, /hello from a Debian package\n$/);
  });

  test('opt-in (SHELLBASE_TEST_INTERNET=1): apt-get installs a real Debian package', { skip: process.env.SHELLBASE_TEST_INTERNET !== '1' && 'set SHELLBASE_TEST_INTERNET=1' }, async () => {
    const internet = await startTestServer();
    try {
      const r = await internet.sb.context('apt').exec('apt-get update -q && apt-get install -y -q cowsay && /usr/games/cowsay moo', { timeoutMs: 600_000 });
      assert.equal(r.exitCode, 0, r.stderr.slice(-2000));
      assert.match(r.stdout, /moo/);
    } finally {
      await internet.close();
    }
  });
});
