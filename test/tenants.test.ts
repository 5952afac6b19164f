import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Shellbase } from '@shellbase/sdk';
import { startTestServer, type TestServer } from './harness.ts';

describe('tenants: keys and isolation', () => {
  let t: TestServer;
  let alice: string;
  let bob: string;
  before(async () => {
    t = await startTestServer();
    const a = await t.http('POST', '/v1/tenants', { body: { name: 'alice' } });
    assert.equal(a.status, 201, a.text);
    assert.match(a.json.apiKey, /^sb_/);
    alice = a.json.apiKey;
    bob = (await t.http('POST', '/v1/tenants', { body: { name: 'bob' } })).json.apiKey;
  });
  after(async () => { await t?.close(); });

  test('only the admin manages tenants; names are unique', async () => {
    assert.equal((await t.http('POST', '/v1/tenants', { body: { name: 'alice' } })).status, 409);
    assert.equal((await t.http('POST', '/v1/tenants', { body: { name: 'eve' }, key: alice })).status, 403);
    assert.equal((await t.http('GET', '/v1/tenants', { key: bob })).status, 403);
    const names = (await t.http('GET', '/v1/tenants')).json.tenants.map((x: { name: string }) => x.name);
    assert.deepEqual(names, ['admin', 'alice', 'bob']);
    assert.equal((await t.http('POST', '/v1/tenants', { body: { name: 'q', quotas: { bogus: 1 } } })).status, 400);
    assert.equal((await t.http('POST', '/v1/tenants', { body: { name: 'q', quotas: { memoryMb: 1e9 } } })).status, 400);
  });

  test("neither tenant can reach the other's contexts or versions by any route", async () => {
    const a = new Shellbase({ url: t.server.url, apiKey: alice });
    const secret = await a.context('secret').exec('echo alice-only > /root/secret');
    const v = secret.version;
    await a.context('secret').fork('secret-fork');
    const as = (method: string, url: string, body?: unknown) => t.http(method, url, { body, key: bob });
    for (const [method, url, body] of [
      ['GET', '/v1/contexts/secret'], ['GET', '/v1/contexts/secret/versions'], ['DELETE', '/v1/contexts/secret'],
      ['POST', '/v1/contexts/secret/fork', { name: 'stolen' }], ['POST', '/v1/contexts/secret/reset', { version: v }],
      ['GET', `/v1/contexts/secret/diff`],
    ] as [string, string, unknown?][]) {
      const r = await as(method, url, body);
      assert.equal(r.status, 404, `${method} ${url}: ${r.text}`);
      assert.doesNotMatch(r.text, /alice/);
    }
    // Routes that take a version or a source context see nothing of alice's either.
    assert.equal((await as('POST', '/v1/contexts', { name: 'mine', from: { context: 'secret' } })).status, 404);
    assert.equal((await as('POST', '/v1/contexts/mine/exec', { command: 'true', version: v })).status, 404);
    assert.equal((await as('GET', `/v1/contexts/mine/files/root/secret?version=${v}`)).status, 404);
    assert.equal((await as('GET', `/v1/contexts/mine/diff?from=${v}`)).status, 404);
    assert.equal((await as('POST', '/v1/contexts/mine/merge', { from: 'secret-fork' })).status, 404);
    // A context of the same name used by exec or files is bob's own, created on first use from the image.
    assert.equal((await as('GET', '/v1/contexts/secret/stat/root/secret')).status, 404);
    const mine = await as('POST', '/v1/contexts/secret/exec', { command: 'cat /root/secret 2>&1; true' });
    assert.match(mine.json.stdout, /No such file/);
    assert.deepEqual((await as('GET', '/v1/contexts')).json.contexts.map((c: { name: string }) => c.name), ['secret'], 'failed requests created nothing');
    assert.equal((await a.context('secret').exec('cat /root/secret')).stdout, 'alice-only\n');
  });

  test('keys rotate and revoke; revoking a tenant locks out every key and keeps its data', async () => {
    const carol = (await t.http('POST', '/v1/tenants', { body: { name: 'carol' } })).json.apiKey;
    await new Shellbase({ url: t.server.url, apiKey: carol }).context('kept').exec('echo kept > /root/k');
    const second = await t.http('POST', '/v1/tenants/carol/keys');
    assert.equal(second.status, 201);
    const keys = (await t.http('GET', '/v1/tenants/carol/keys')).json.keys;
    assert.equal(keys.length, 2);
    assert.ok(keys.every((k: { id: string }) => /^k_[0-9a-f]{12}$/.test(k.id)), 'keys are named, never shown again');
    const first = keys.find((k: { id: string }) => k.id !== second.json.key.id);
    assert.equal((await t.http('DELETE', `/v1/tenants/carol/keys/${first.id}`)).status, 204);
    assert.equal((await t.http('GET', '/v1/contexts', { key: carol })).status, 401, 'the revoked key is refused');
    assert.equal((await t.http('GET', '/v1/contexts', { key: second.json.apiKey })).json.contexts[0].name, 'kept');
    assert.equal((await t.http('DELETE', `/v1/tenants/carol/keys/${first.id}`)).status, 404, 'already revoked');
    assert.equal((await t.http('DELETE', '/v1/tenants/carol/keys/k_nope', { key: alice })).status, 403);
    assert.equal((await t.http('DELETE', '/v1/tenants/admin')).status, 412, 'the admin key is not managed here');
    assert.equal((await t.http('DELETE', '/v1/tenants/carol')).status, 204);
    assert.equal((await t.http('GET', '/v1/contexts', { key: second.json.apiKey })).status, 401);
    const fresh = (await t.http('POST', '/v1/tenants/carol/keys')).json.apiKey;
    assert.equal((await t.http('GET', '/v1/contexts', { key: fresh })).json.contexts[0].name, 'kept', 'its data stayed');
  });

  test('usage totals equal the sum of the per-query results, per tenant', async () => {
    const daveKey = (await t.http('POST', '/v1/tenants', { body: { name: 'dave' } })).json.apiKey;
    const dave = new Shellbase({ url: t.server.url, apiKey: daveKey });
    const start = new Date().toISOString();
    const results = [
      await dave.context('d1').exec('head -c 10000 /dev/zero > /root/a'),
      await dave.context('d1').exec('exit 2'),
      await dave.context('d2').exec('head -c 5000 /dev/zero > /root/b'),
    ];
    const u = await t.http('GET', `/v1/usage?from=${start}`, { key: daveKey });
    assert.equal(u.status, 200, u.text);
    const sum = (f: (r: (typeof results)[number]) => number) => results.reduce((s, r) => s + f(r), 0);
    assert.equal(u.json.total.queries, 3);
    assert.equal(u.json.total.cpuMs, sum((r) => r.usage.cpuMs));
    assert.equal(u.json.total.wallMs, sum((r) => r.usage.wallMs));
    assert.equal(u.json.total.bytesStored, 15000, 'the layers its versions hold');
    assert.deepEqual(u.json.items.map((i: { key: string; queries: number; bytesStored: number }) => [i.key, i.queries, i.bytesStored]),
      [['d1', 2, 10000], ['d2', 1, 5000]]);
    const byKind = await t.http('GET', '/v1/usage?groupBy=kind', { key: daveKey });
    assert.deepEqual(byKind.json.items.map((i: { key: string; queries: number }) => [i.key, i.queries]), [['query', 3]]);
    assert.deepEqual((await t.http('GET', '/v1/usage?tenant=dave')).json.total, u.json.total, 'the admin reads any tenant');
    assert.equal((await t.http('GET', '/v1/usage?tenant=bob', { key: daveKey })).status, 403);
    assert.equal((await t.http('GET', '/v1/usage', { key: bob })).json.items.some((i: { key: string }) => i.key.startsWith('d')), false);
    assert.equal((await t.http('GET', '/v1/usage?from=yesterday', { key: daveKey })).status, 400);
  });

  test('quotas refuse at the limit with 429, create nothing, and accept again after deletes', async () => {
    const made = await t.http('POST', '/v1/tenants', {
      body: { name: 'erin', quotas: { contexts: 2, concurrentQueries: 1, memoryMb: 64, storedBytes: 20000 } },
    });
    assert.equal(made.status, 201, made.text);
    const key = made.json.apiKey;
    const as = (method: string, url: string, body?: unknown) => t.http(method, url, { body, key });
    assert.equal((await as('POST', '/v1/contexts', { name: 'e1' })).status, 201);
    assert.equal((await as('POST', '/v1/contexts/e2/exec', { command: 'true' })).status, 200);
    const over = await as('POST', '/v1/contexts/e3/exec', { command: 'true' });
    assert.equal(over.status, 429);
    assert.equal(over.json.error.code, 'limit_exceeded');
    assert.match(over.json.error.message, /contexts/);
    assert.ok(over.json.error.hint);
    assert.equal((await as('POST', '/v1/contexts/e1/fork', { name: 'e4' })).status, 429);
    assert.deepEqual((await as('GET', '/v1/contexts')).json.contexts.map((c: { name: string }) => c.name), ['e1', 'e2']);
    assert.equal((await as('DELETE', '/v1/contexts/e2')).status, 204);
    assert.equal((await as('POST', '/v1/contexts', { name: 'e3' })).status, 201, 'accepted again after a delete');

    // Ceilings: asking above is a 400; the default is lowered to the ceiling.
    assert.equal((await as('POST', '/v1/contexts/e1/exec', { command: 'true', limits: { memoryMb: 128 } })).status, 400);
    const bomb = await as('POST', '/v1/contexts/e1/exec', { command: 'python3 -c "x = bytearray(100 * 1024 * 1024)"', commit: 'never' });
    assert.equal(bomb.json.oomKilled, true);

    // One query at a time.
    const slow = as('POST', '/v1/contexts/e1/exec', { command: 'sleep 1', commit: 'never' });
    await new Promise((r) => setTimeout(r, 300));
    const second = await as('POST', '/v1/contexts/e3/exec', { command: 'true' });
    assert.equal(second.status, 429);
    assert.match(second.json.error.message, /concurrentQueries/);
    assert.equal((await slow).status, 200);

    // Stored bytes: the write that crosses the quota lands; the next one is refused.
    assert.equal((await as('POST', '/v1/contexts/e1/exec', { command: 'head -c 30000 /dev/zero > /root/big' })).json.committed, true);
    const full = await as('POST', '/v1/contexts/e1/exec', { command: 'echo more > /root/more' });
    assert.equal(full.status, 429);
    assert.match(full.json.error.message, /storedBytes/);
  });
});
