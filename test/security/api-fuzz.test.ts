import assert from 'node:assert/strict';
import { request } from 'node:http';
import { connect } from 'node:net';
import { after, before, describe, test } from 'node:test';
import fc from 'fast-check';
import { Shellbase } from '@shellbase/sdk';
import { startTestServer, sleep, type TestServer } from '../harness.ts';

// Threat: a client sends whatever it likes (names, paths, query strings, bodies, headers, or
// nothing at all, slowly) to crash the server, make it fail (500), or read another tenant's data.
// Defence: schemas on every route, typed errors for everything else, tenant checks in the engine,
// bounded bodies and headers, and timeouts on receiving a request.
describe('security: the API never trusts its input', () => {
  let t: TestServer;
  let bobKey: string;
  let alice: Shellbase;
  let aliceVersion: string;
  const SECRET = 'ALICE-SECRET-4f9d';
  before(async () => {
    t = await startTestServer({ http: { headersTimeoutMs: 1000, requestTimeoutMs: 2000 } });
    const a = (await t.http('POST', '/v1/tenants', { body: { name: 'alice' } })).json.apiKey;
    bobKey = (await t.http('POST', '/v1/tenants', { body: { name: 'bob' } })).json.apiKey;
    alice = new Shellbase({ url: t.server.url, apiKey: a });
    aliceVersion = (await alice.context('alpha-private').exec(`echo ${SECRET} > /root/secret`)).version;
    await new Shellbase({ url: t.server.url, apiKey: bobKey }).context('mine').exec('echo bob > /root/b');
  });
  after(async () => { await t?.close(); });

  /** One raw request on its own connection (no URL normalisation, any bytes), answered or failed at the socket. */
  const send = (method: string, path: string, headers: Record<string, string>, body?: Buffer) =>
    new Promise<{ status: number; text: string }>((resolve, reject) => {
      const url = new URL(t.server.url);
      if (body) headers['content-length'] = String(body.length);
      const req = request({ host: url.hostname, port: url.port, method, path, headers, agent: false }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString('latin1') }));
        res.on('error', reject);
      });
      req.on('error', reject);
      req.end(body);
    });

  const tricky = ['alpha-private', 'mine', '..', '%2e%2e', '%2E%2E%2F', '%00', 'a%2Fb', '.', '%20', 'x'.repeat(300), '%F0%9F%92%A5', '%ff'];
  const segment = fc.oneof(fc.constantFrom(...tricky), fc.string({ maxLength: 40 }).map(encodeURIComponent));
  const filePath = fc.array(fc.oneof(segment, fc.constantFrom('root', 'secret', 'etc', 'passwd', 'proc', 'self')), { maxLength: 6 }).map((s) => s.join('/'));
  const routes: [string, string][] = [
    ['GET', '/v1/contexts'], ['POST', '/v1/contexts'], ['GET', '/v1/contexts/{n}'], ['DELETE', '/v1/contexts/{n}'],
    ['POST', '/v1/contexts/{n}/exec'], ['GET', '/v1/contexts/{n}/versions'], ['POST', '/v1/contexts/{n}/fork'],
    ['POST', '/v1/contexts/{n}/reset'], ['GET', '/v1/contexts/{n}/diff'], ['POST', '/v1/contexts/{n}/merge'],
    ['GET', '/v1/contexts/{n}/files/{p}'], ['PUT', '/v1/contexts/{n}/files/{p}'], ['DELETE', '/v1/contexts/{n}/files/{p}'],
    ['GET', '/v1/contexts/{n}/stat/{p}'], ['POST', '/v1/tenants'], ['GET', '/v1/tenants'], ['POST', '/v1/tenants/{n}/keys'],
    ['DELETE', '/v1/tenants/{n}'], ['GET', '/v1/usage'], ['POST', '/v1/gc'], ['GET', '/v1/openapi.json'], ['GET', '/healthz'],
    ['PATCH', '/v1/contexts/{n}'], ['GET', '/v1/images'], ['POST', '/v1/images/import'], ['DELETE', '/v1/images/{p}'], ['POST', '/v1/builds'],
    ['POST', '/v1/machines/{n}/hibernate'], ['GET', '/v1/machines/{n}/console'], ['GET', '/v1/machines/{n}/pty'],
  ];
  const queryKeys = ['version', 'from', 'to', 'path', 'limit', 'mode', 'format', 'recursive', 'groupBy', 'tenant', 'tag', 'dockerfile', 'ref', 'tail', 'cols', 'x'];
  const query = fc.array(fc.tuple(fc.constantFrom(...queryKeys), fc.oneof(segment, fc.constant('__ALICE_VERSION__'))), { maxLength: 3 })
    .map((kv) => (kv.length ? `?${kv.map(([k, v]) => `${k}=${v}`).join('&')}` : ''));
  const json = fc.oneof(
    fc.jsonValue({ maxDepth: 3 }),
    fc.record({
      name: fc.oneof(segment, fc.constant('alpha-private')), command: fc.constantFrom('true', 'cat /root/secret', 'ls /'),
      from: fc.oneof(fc.constant('alpha-private'), fc.record({ context: fc.constant('alpha-private'), version: fc.constant('__ALICE_VERSION__') })),
      version: fc.constantFrom('__ALICE_VERSION__', 'v_x', ''), limits: fc.dictionary(fc.string({ maxLength: 10 }), fc.oneof(fc.integer(), fc.double(), fc.string())),
      argv: fc.array(fc.string({ maxLength: 10 }), { maxLength: 3 }), timeoutMs: fc.oneof(fc.integer(), fc.double()),
    }, { requiredKeys: [] }),
  );
  const body = fc.oneof(
    json.map((j) => Buffer.from(JSON.stringify(j).replaceAll('__ALICE_VERSION__', '@'))),
    fc.uint8Array({ maxLength: 200 }).map((b) => Buffer.from(b)),
    fc.constant(undefined),
  );
  const contentType = fc.constantFrom('application/json', 'application/x-ndjson', 'text/plain', 'application/octet-stream',
    'application/x-tar', 'multipart/form-data; boundary=x', ';;;', 'application/json; charset=utf-16');
  // BOB stands for bob's key, which exists only once `before` ran.
  const key = fc.oneof({ weight: 8, arbitrary: fc.constant('Bearer BOB') }, { weight: 1, arbitrary: fc.constantFrom('', 'Bearer', 'Bearer sb_nope', 'Basic Ym9i') });
  const extra = fc.dictionary(fc.constantFrom('range', 'accept', 'x-forwarded-for', 'if-match', 'transfer-encoding-x'),
    fc.constantFrom('bytes=0-', 'bytes=-1', 'bytes=5-1', 'bytes=0-0,2-3', 'application/x-ndjson', '*/*', 'garbage'), { maxKeys: 2 });

  test('random requests: never a 500, never a crash, never another tenant\'s data', async () => {
    const statuses = new Map<number, number>();
    await fc.assert(fc.asyncProperty(fc.constantFrom(...routes), segment, filePath, query, body, contentType, key, extra,
      async ([method, template], n, p, q, b, type, auth, headers) => {
        const path = template.replace('{n}', n).replace('{p}', p) + q.replaceAll('__ALICE_VERSION__', aliceVersion);
        const withBody = b?.toString().replaceAll('@', aliceVersion);
        const h: Record<string, string> = { ...headers, 'content-type': type };
        if (auth) h.authorization = auth.replace('BOB', bobKey);
        const r = await send(method, path, h, withBody === undefined ? undefined : Buffer.from(withBody));
        statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
        assert.ok(r.status >= 200 && r.status < 500, `${method} ${path} -> ${r.status}: ${r.text.slice(0, 300)}`);
        // Echoing what the client sent is no leak; anything else of alice's is. (Bob may make his own
        // context named alpha-private: names are per tenant; version ids are not.)
        const sent = `${path} ${withBody ?? ''}`;
        const leaked = [SECRET, aliceVersion].filter((s) => r.text.includes(s) && (s === SECRET || !sent.includes(s)));
        assert.deepEqual(leaked, [], `${method} ${path} leaked alice's data: ${r.text.slice(0, 300)}`);
      }), { numRuns: Number(process.env.FUZZ_RUNS ?? 400), includeErrorInReport: true });
    assert.ok((statuses.get(200) ?? 0) + (statuses.get(201) ?? 0) > 0 && (statuses.get(400) ?? 0) > 0, `a mix of answers: ${JSON.stringify([...statuses])}`);
    // Alice's context is as it was.
    assert.equal((await alice.context('alpha-private').exec('cat /root/secret', { commit: 'never' })).stdout, `${SECRET}\n`);
    assert.equal((await alice.context('alpha-private').versions())[0].id, aliceVersion);
  });

  test('oversized headers get 431 and JSON bodies over 10 MiB 413, in the one error form', async () => {
    const big = await send('GET', '/v1/contexts', { authorization: `Bearer ${bobKey}`, 'x-big': 'a'.repeat(20_000) });
    assert.equal(big.status, 431);
    assert.equal(JSON.parse(big.text).error.code, 'payload_too_large');
    const body = Buffer.from(JSON.stringify({ command: 'true', stdin: 'x'.repeat(11 * 1024 * 1024) }));
    const huge = await send('POST', '/v1/contexts/mine/exec', { authorization: `Bearer ${bobKey}`, 'content-type': 'application/json' }, body);
    assert.equal(huge.status, 413);
    const bad = await send('GET', '/v1/contexts/%ff', { authorization: `Bearer ${bobKey}` });
    assert.deepEqual([bad.status, JSON.parse(bad.text).error.code], [400, 'invalid_argument']);
  });

  test('a client that sends its request slowly is cut off, and others are served meanwhile', async () => {
    const url = new URL(t.server.url);
    const closedAfter = (partial: string) => new Promise<number>((resolve) => {
      const started = Date.now();
      const s = connect(Number(url.port), url.hostname, () => s.write(partial));
      s.on('data', () => undefined);
      s.on('close', () => resolve(Date.now() - started));
      s.on('error', () => undefined);
    });
    const headers = closedAfter('GET /v1/contexts HTTP/1.1\r\nHost: x\r\n'); // never finishes its headers
    const slowBody = closedAfter(`PUT /v1/contexts/mine/files/root/slow HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${bobKey}\r\nContent-Length: 100\r\n\r\nabc`);
    await sleep(200);
    assert.equal((await send('GET', '/healthz', {})).status, 200, 'others are served while they dawdle');
    const [h, b] = await Promise.all([headers, slowBody]);
    assert.ok(h < 5000 && b < 8000, `both cut off (headers after ${h} ms, body after ${b} ms)`);
    const r = await send('GET', '/v1/contexts/mine/stat/root/slow', { authorization: `Bearer ${bobKey}` });
    assert.equal(r.status, 404, 'the half-sent file was not written');
  });
});
