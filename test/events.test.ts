import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, test } from 'node:test';
import type { ShellbaseEvent } from '@shellbase/protocol';
import { verifyShellbaseSignature } from '@shellbase/server';
import { sleep, startTestServer, type TestServer } from './harness.ts';

// Events and webhooks against a real server: commits of real sandboxes, a real service, the
// egress proxy in front of every delivery. 127.0.0.2 stands for the internet (the server lets that
// one address through, SHELLBASE_EGRESS_ALLOW_CIDRS); 127.0.0.1 is this host and stays refused.
const UPSTREAM = '127.0.0.2';

/** A Server-Sent Events reader over fetch: events as they come, until closed. */
function sse(t: TestServer, query = '', headers: Record<string, string> = {}) {
  const got: ShellbaseEvent[] = [];
  const abort = new AbortController();
  const opened = (async () => {
    const res = await fetch(`${t.server.url}/v1/events${query}`, { headers: { authorization: `Bearer ${t.key}`, accept: 'text/event-stream', ...headers }, signal: abort.signal });
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /text\/event-stream/);
    const reader = res.body!.getReader();
    let buf = '';
    const pump = async () => {
      for (;;) {
        const { done, value } = await reader.read().catch(() => ({ done: true, value: undefined }));
        if (done) return;
        buf += Buffer.from(value!).toString('utf8');
        let i: number;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, i);
          buf = buf.slice(i + 2);
          const data = block.split('\n').find((l) => l.startsWith('data: '));
          const id = block.split('\n').find((l) => l.startsWith('id: '));
          if (data) {
            const e = JSON.parse(data.slice(6)) as ShellbaseEvent;
            assert.equal(id, `id: ${e.id}`, 'the SSE id is the event id');
            got.push(e);
          }
        }
      }
    };
    void pump();
  })();
  return {
    got, opened,
    async until(what: string, check: (events: ShellbaseEvent[]) => boolean, ms = 15_000) {
      const end = Date.now() + ms;
      while (!check(got)) {
        if (Date.now() > end) throw new Error(`timed out waiting for ${what}; got ${JSON.stringify(got.map((e) => e.kind))}`);
        await sleep(20);
      }
    },
    close: () => abort.abort(),
  };
}

interface Received { headers: IncomingMessage['headers']; body: string }

describe('events and webhooks', { timeout: 300_000 }, () => {
  let t: TestServer;
  let receiver: Server;
  let port = 0;
  const received: Received[] = [];
  /** Statuses the receiver answers with, in turn (then 200). */
  const answers: number[] = [];

  before(async () => {
    receiver = createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => { body += c.toString(); });
      req.on('end', () => {
        received.push({ headers: req.headers, body });
        // /slow answers its status, then never ends its body.
        if (req.url === '/slow') { res.writeHead(200); res.write('still going'); return; }
        res.writeHead(answers.shift() ?? 200).end('ok');
      });
    });
    await new Promise<void>((resolve) => receiver.listen(0, UPSTREAM, resolve));
    port = (receiver.address() as { port: number }).port;
    t = await startTestServer({ egress: { default: { egress: 'public' }, allowCidrs: [`${UPSTREAM}/32`], hosts: { 'hooks.test': UPSTREAM }, maxPerSandbox: 8, maxPerTenant: 1024, logDays: 7 } });
  });

  after(async () => {
    await t?.close();
    await new Promise((r) => receiver.close(r));
  });

  test('a commit reaches an SSE listener as version.committed, with its context, version, parent and cause', async () => {
    await t.sb.contexts.create({ name: 'ev', image: 'debian' });
    const s = sse(t, '?context=ev');
    await s.opened;
    const r = await t.sb.context('ev').exec('echo one > /root/one');
    await s.until('the commit', (g) => g.some((e) => e.kind === 'version.committed'));
    const e = s.got.find((x) => x.kind === 'version.committed')!;
    assert.equal(e.context, 'ev');
    assert.equal(e.data.version, r.version);
    assert.equal((e.data.cause as { kind: string }).kind, 'exec');
    assert.equal(typeof e.data.parent, 'string');
    s.close();
  });

  test('Last-Event-ID resumes after an event: the kept ones first, each once, in order; filters apply', async () => {
    const all = await t.http('GET', '/v1/events?context=ev');
    assert.equal(all.status, 200);
    const last = (all.json.events as ShellbaseEvent[]).at(-1)!;
    const a = await t.sb.context('ev').exec('echo two > /root/two');
    const b = await t.sb.context('ev').exec('echo three > /root/three');
    await t.sb.contexts.create({ name: 'other', image: 'debian' });
    await t.sb.context('other').exec('echo x > /root/x');
    const s = sse(t, '?context=ev&kinds=version.committed', { 'last-event-id': last.id });
    await s.until('the two missed commits', (g) => g.length >= 2);
    assert.deepEqual(s.got.slice(0, 2).map((e) => e.data.version), [a.version, b.version]);
    const c = await t.sb.context('ev').exec('echo four > /root/four');
    await s.until('the live commit', (g) => g.some((e) => e.data.version === c.version));
    assert.ok(s.got.every((e) => e.context === 'ev' && e.kind === 'version.committed'), 'the filter holds for kept and live events');
    assert.deepEqual(s.got.map((e) => Number(e.id)), [...s.got.map((e) => Number(e.id))].sort((x, y) => x - y));
    assert.equal(new Set(s.got.map((e) => e.id)).size, s.got.length);
    s.close();
    // Bad input: an unknown kind, a malformed id.
    assert.equal((await t.http('GET', '/v1/events?kinds=nope')).status, 400);
    assert.equal((await t.http('GET', '/v1/events?after=abc')).status, 400);
  });

  test('a service that wakes and sleeps, and one that fails to start, are events', async () => {
    const s = sse(t, '?kinds=service.woke,service.slept,service.failed');
    await s.opened;
    const ctx = t.sb.context('ev');
    await ctx.exec(`cat > /root/app.py <<'PY'
import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b'hi')
http.server.HTTPServer(('0.0.0.0', 8000), H).serve_forever()
PY`);
    const svc = await ctx.services.create({ name: 'web', command: 'python3 /root/app.py', port: 8000 });
    const url = new URL(svc.url);
    const gw = new URL(t.server.gatewayUrl);
    const { request } = await import('node:http');
    await new Promise<void>((resolve, reject) => {
      request({ host: gw.hostname, port: gw.port, path: '/', headers: { host: url.host }, agent: false }, (res) => { res.resume(); res.on('end', () => resolve()); }).on('error', reject).end();
    });
    await ctx.services.stop('web');
    const crash = await ctx.services.create({ name: 'crash', command: 'echo boom >&2; exit 3', port: 8003 });
    await new Promise<void>((resolve) => {
      request({ host: gw.hostname, port: gw.port, path: '/', headers: { host: new URL(crash.url).host }, agent: false }, (res) => { res.resume(); res.on('end', () => resolve()); }).on('error', () => resolve()).end();
    });
    await s.until('woke, slept and failed', (g) => ['service.woke', 'service.slept', 'service.failed'].every((k) => g.some((e) => e.kind === k)));
    assert.deepEqual(s.got.filter((e) => e.data.service === 'web').map((e) => e.kind), ['service.woke', 'service.slept']);
    const failed = s.got.find((e) => e.kind === 'service.failed')!;
    assert.equal(failed.data.service, 'crash');
    assert.equal(failed.context, 'ev');
    assert.equal(typeof failed.data.reason, 'string');
    s.close();
  });

  test('the SDK streams events (resuming after an id), lists them and manages webhooks', async () => {
    const got: ShellbaseEvent[] = [];
    const stream = await t.sb.events.stream({ kinds: ['version.committed'], context: 'ev' }, (e) => { got.push(e); });
    const r = await t.sb.context('ev').exec('echo sdk > /root/sdk');
    const end = Date.now() + 10_000;
    while (!got.some((e) => e.data.version === r.version) && Date.now() < end) await sleep(20);
    stream.close();
    await stream.done;
    const seen = got.find((e) => e.data.version === r.version)!;
    assert.ok(seen, 'the commit came through the stream');
    const r2 = await t.sb.context('ev').exec('echo sdk2 > /root/sdk2');
    const missed = await t.sb.events.list({ context: 'ev', kinds: ['version.committed'], after: seen.id });
    assert.deepEqual(missed.map((e) => e.data.version), [r2.version]);
    const hook = await t.sb.webhooks.create({ url: `http://hooks.test:${port}/sdk`, events: ['machine.state', 'sandbox.lifecycle'] });
    assert.equal(typeof hook.secret, 'string');
    assert.deepEqual((await t.sb.webhooks.list()).map((w) => [w.id, w.events]), [[hook.id, ['machine.state', 'sandbox.lifecycle']]]);
    assert.deepEqual(await t.sb.webhooks.deliveries(hook.id), []);
    await t.sb.webhooks.delete(hook.id);
    assert.deepEqual(await t.sb.webhooks.list(), []);
  });

  test('the CLI lists events and manages webhooks; a bad kind is a usage error', async () => {
    const cli = async (...args: string[]) => promisify(execFile)(process.execPath, [path.resolve('packages/cli/dist/main.js'), ...args], {
      env: { ...process.env, SHELLBASE_URL: t.server.url, SHELLBASE_API_KEY: t.key },
    }).then((r) => ({ code: 0, stdout: r.stdout, stderr: r.stderr }), (e: { code: number; stdout: string; stderr: string }) => ({ code: e.code, stdout: e.stdout, stderr: e.stderr }));
    const r = await t.sb.context('ev').exec('echo cli > /root/cli');
    const listed = await cli('events', '--kind', 'version.committed', '--context', 'ev');
    assert.equal(listed.code, 0, listed.stderr);
    assert.match(listed.stdout, new RegExp(`\\tversion\\.committed\\tev\\t.*"version":"${r.version}"`));
    const bad = await cli('events', '--kind', 'nope');
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /unknown event kind "nope"/);
    const made = await cli('webhook', 'create', `http://hooks.test:${port}/cli`, '--kind', 'machine.state', '--name', 'cli');
    assert.equal(made.code, 0, made.stderr);
    const id = /webhook (\S+):/.exec(made.stdout)![1];
    assert.match((await cli('webhook', 'ls')).stdout, new RegExp(`${id}\\ton\\thttp://hooks.test:${port}/cli\\tmachine.state\\tcli`));
    assert.equal((await cli('webhook', 'rm', id)).code, 0);
    assert.equal((await cli('webhook', 'rm', id)).code, 1, 'a second delete finds nothing');
  });

  test('a quota\'s refusal is a quota.refused event of that tenant only', async () => {
    const made = await t.http('POST', '/v1/tenants', { body: { name: 'small', quotas: { contexts: 1 } } });
    const key = made.json.apiKey as string;
    assert.equal((await t.http('POST', '/v1/contexts', { key, body: { name: 'a' } })).status, 201);
    const refused = await t.http('POST', '/v1/contexts', { key, body: { name: 'b' } });
    assert.equal(refused.status, 429);
    const mine = await t.http('GET', '/v1/events?kinds=quota.refused', { key });
    assert.equal(mine.json.events.length, 1);
    assert.deepEqual(mine.json.events[0].data, { quota: 'contexts', limit: 1, operation: 'context.create' });
    assert.equal((await t.http('GET', '/v1/events?kinds=quota.refused')).json.events.length, 0, 'the admin tenant sees none of it');
  });

  test('a webhook gets its events signed, is retried after a 500, and shows its deliveries', async () => {
    const made = await t.http('POST', '/v1/webhooks', { body: { url: `http://hooks.test:${port}/in`, events: ['version.committed'], name: 'ci' } });
    assert.equal(made.status, 201);
    const hook = made.json as { id: string; secret: string; events: string[] };
    assert.deepEqual(hook.events, ['version.committed']);
    received.length = 0;
    answers.push(500);
    const r = await t.sb.context('ev').exec('echo hook > /root/hook');
    const end = Date.now() + 20_000;
    while (received.length < 2 && Date.now() < end) await sleep(50);
    assert.equal(received.length, 2, `one attempt answered 500, the retry 200; deliveries: ${JSON.stringify((await t.http('GET', `/v1/webhooks/${hook.id}/deliveries`)).json)}`);
    for (const got of received) {
      const body = JSON.parse(got.body) as ShellbaseEvent;
      assert.equal(body.data.version, r.version);
      assert.equal(got.headers['shellbase-webhook-id'], hook.id);
      assert.ok(verifyShellbaseSignature(hook.secret, got.body, String(got.headers['shellbase-signature'])), 'the signature checks out');
      assert.ok(!verifyShellbaseSignature('another secret', got.body, String(got.headers['shellbase-signature'])));
      assert.ok(!verifyShellbaseSignature(hook.secret, `${got.body} `, String(got.headers['shellbase-signature'])), 'a changed body fails');
    }
    let deliveries: { state: string; attempts: number; lastStatus?: number }[] = [];
    while (Date.now() < end) {
      deliveries = (await t.http('GET', `/v1/webhooks/${hook.id}/deliveries`)).json.deliveries;
      if (deliveries[0]?.state === 'delivered') break;
      await sleep(50);
    }
    assert.deepEqual(deliveries.map((d) => [d.state, d.attempts, d.lastStatus]), [['delivered', 2, 200]]);
    // The delivery went through the egress proxy: it is in the context's egress log as a webhook connection.
    const log = await t.http('GET', '/v1/contexts/ev/network/log');
    assert.ok((log.json.connections as { kind: string; host: string; allowed: boolean }[]).some((c) => c.kind === 'webhook' && c.host === 'hooks.test' && c.allowed));
    assert.equal((await t.http('DELETE', `/v1/webhooks/${hook.id}`)).status, 204);
    assert.equal((await t.http('GET', `/v1/webhooks/${hook.id}`)).status, 404);
  });

  test('a receiver that answers its status and never ends its body is delivered to; a stream left open does not hold up a close', async () => {
    const hook = (await t.http('POST', '/v1/webhooks', { body: { url: `http://hooks.test:${port}/slow`, events: ['version.committed'] } })).json as { id: string };
    await t.sb.context('ev').exec('echo slow > /root/slow');
    let d: { state: string; attempts: number; lastStatus?: number } | undefined;
    const end = Date.now() + 15_000;
    while (Date.now() < end) {
      d = (await t.http('GET', `/v1/webhooks/${hook.id}/deliveries`)).json.deliveries[0];
      if (d?.state === 'delivered') break;
      await sleep(50);
    }
    assert.deepEqual([d?.state, d?.attempts, d?.lastStatus], ['delivered', 1, 200]);
    assert.equal((await t.http('DELETE', `/v1/webhooks/${hook.id}`)).status, 204);
    // Another server, a stream open on it: its close ends the stream (the test's timeout catches a hang).
    const other = await startTestServer();
    const res = await fetch(`${other.server.url}/v1/events`, { headers: { authorization: `Bearer ${other.key}`, accept: 'text/event-stream' } });
    assert.equal(res.status, 200);
    const reader = res.body!.getReader();
    await reader.read();
    await other.close();
    for (;;) if ((await reader.read().catch(() => ({ done: true }))).done) break;
  });

  test('a tenant has at most 32 streams open on a server; closing one makes room', async () => {
    const key = (await t.http('POST', '/v1/tenants', { body: { name: 'streams' } })).json.apiKey as string;
    const open = (k: string) => {
      const abort = new AbortController();
      return fetch(`${t.server.url}/v1/events`, { headers: { authorization: `Bearer ${k}`, accept: 'text/event-stream' }, signal: abort.signal })
        .then((res) => ({ res, close: () => abort.abort() }));
    };
    const streams = await Promise.all(Array.from({ length: 32 }, () => open(key)));
    assert.ok(streams.every((s) => s.res.status === 200));
    const over = await open(key);
    assert.equal(over.res.status, 429);
    assert.equal(((await over.res.json()) as { error: { code: string } }).error.code, 'limit_exceeded');
    assert.equal((await open(t.key).then((s) => { s.close(); return s.res.status; })), 200, 'another tenant is not counted');
    streams[0].close();
    let again = 0;
    for (let i = 0; i < 100 && again !== 200; i++) { await sleep(20); const s = await open(key); again = s.res.status; s.close(); }
    assert.equal(again, 200);
    for (const s of streams) s.close();
  });

  test('refused addresses: at registration (400, nothing stored) and at delivery (nothing sent)', async () => {
    const bad = [
      { url: `http://127.0.0.1:${port}/in`, events: ['version.committed'] },
      { url: 'http://10.1.2.3/in', events: ['version.committed'] },
      { url: 'http://169.254.169.254/latest', events: ['version.committed'] },
      { url: `ftp://hooks.test:${port}/in`, events: ['version.committed'] },
      { url: `http://user:pw@hooks.test:${port}/in`, events: ['version.committed'] },
      { url: `http://hooks.test:${port}/in`, events: ['nope'] },
    ];
    for (const body of bad) {
      const r = await t.http('POST', '/v1/webhooks', { body });
      assert.equal(r.status, 400, `${JSON.stringify(body)}: ${r.text}`);
    }
    assert.deepEqual((await t.http('GET', '/v1/webhooks')).json.webhooks, []);
    // A tenant whose policy later refuses the host: the delivery is refused by the egress proxy, never sent.
    const made = await t.http('POST', '/v1/tenants', { body: { name: 'closing' } });
    const key = made.json.apiKey as string;
    const hook = (await t.http('POST', '/v1/webhooks', { key, body: { url: `http://hooks.test:${port}/in`, events: ['version.committed'] } })).json as { id: string };
    assert.equal((await t.http('PUT', `/v1/tenants/${made.json.tenant.name}`, { body: { network: { egress: 'none' } } })).status, 200);
    received.length = 0;
    await t.http('POST', '/v1/contexts', { key, body: { name: 'c', image: 'debian' } });
    await t.http('POST', '/v1/contexts/c/exec', { key, body: { command: 'echo x > /root/x' } });
    let d: { state: string; attempts: number; lastError?: string } | undefined;
    const end = Date.now() + 15_000;
    while (Date.now() < end) {
      d = (await t.http('GET', `/v1/webhooks/${hook.id}/deliveries`, { key })).json.deliveries[0];
      if (d && d.attempts >= 1) break;
      await sleep(50);
    }
    assert.equal(d?.state, 'pending', 'refused attempts are retried until the day is over');
    assert.match(d?.lastError ?? '', /network policy \(none\)/);
    assert.equal(received.length, 0, 'nothing reached the receiver');
  });
});
