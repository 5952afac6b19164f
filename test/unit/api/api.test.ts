import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { fastApi, type FastApi } from './fast-api.ts';

/**
 * The fast API tier: routes, error mapping and the E2B translation through real HTTP, over the
 * in-memory backends (test/unit/api/fast-api.ts). What needs a host (sandboxes with real
 * binaries, machines) is the integration tests'.
 */
describe('fast tier: the HTTP API and the E2B front door over in-memory backends', () => {
  let api: FastApi;
  before(async () => { api = await fastApi(); });
  after(async () => { await api?.close(); });

  test('a query commits a version; files, diff, versions and fork answer from the store', async () => {
    const ctx = api.sb.context('fast');
    const r = await ctx.exec('echo hello > /root/hi && cat /root/hi');
    assert.deepEqual([r.exitCode, r.stdout, r.committed], [0, 'hello\n', true]);
    assert.equal((await ctx.files.read('/root/hi')).toString(), 'hello\n');
    assert.deepEqual((await ctx.diff()).changes.map((c) => [c.path, c.kind]), [['/root/hi', 'added']]);
    const versions = await ctx.versions();
    assert.equal(versions[0]!.id, r.version);
    await ctx.fork('fast-fork');
    const f = await api.sb.context('fast-fork').exec('cat /root/hi', { commit: 'never' });
    assert.equal(f.stdout, 'hello\n');
    assert.deepEqual((await api.sb.contexts.list()).map((c) => c.name).sort(), ['fast', 'fast-fork']);
  });

  test('errors: one wire form with a code, a hint and the right status', async () => {
    const noKey = await api.http('GET', '/v1/contexts', { key: null });
    assert.equal(noKey.status, 401);
    assert.equal(noKey.json.error.code, 'unauthorized');
    const badName = await api.http('POST', '/v1/contexts', { body: { name: 'no spaces here' } });
    assert.equal(badName.status, 400);
    assert.equal(badName.json.error.code, 'invalid_argument');
    assert.ok(badName.json.error.hint, 'a hint says how to fix it');
    const missing = await api.http('GET', '/v1/contexts/nowhere');
    assert.deepEqual([missing.status, missing.json.error.code], [404, 'not_found']);
    const tooLong = await api.http('POST', '/v1/contexts/fast/exec', { body: { command: 'true', timeoutMs: 90_000_000 } });
    assert.deepEqual([tooLong.status, tooLong.json.error.code], [400, 'invalid_argument']);
    assert.equal(tooLong.json.error.details.max, 86_400_000);
    const overTenant = await api.http('POST', '/v1/contexts/fast/exec', { body: { command: 'true', timeoutMs: 7_200_000 } });
    assert.deepEqual([overTenant.status, overTenant.json.error.details.max], [400, 3_600_000], 'the tenant\'s maximum: 1 h by default');
  });

  test('a timed-out query names its limit', async () => {
    const r = await api.sb.context('fast').exec('sleep 5', { timeoutMs: 200, commit: 'never' });
    assert.equal(r.timedOut, true);
    assert.deepEqual(r.limit, { name: 'timeoutMs', value: 200, max: 3_600_000 });
  });

  test('quotas: a tenant at its contexts quota gets 429 and nothing is made', async () => {
    const t = await api.http('POST', '/v1/tenants', { body: { name: 'small', quotas: { contexts: 1 } } });
    assert.equal(t.status, 201, JSON.stringify(t.json));
    const key = t.json.apiKey as string;
    assert.equal((await api.http('POST', '/v1/contexts', { key, body: { name: 'one' } })).status, 201);
    const over = await api.http('POST', '/v1/contexts', { key, body: { name: 'two' } });
    assert.deepEqual([over.status, over.json.error.code], [429, 'limit_exceeded']);
    assert.deepEqual((await api.http('GET', '/v1/contexts', { key })).json.contexts.map((c: { name: string }) => c.name), ['one']);
    assert.equal((await api.http('GET', '/v1/contexts/fast', { key })).status, 404, 'another tenant\'s context is not found');
  });

  test('machines: listed, bad input refused, and a create that cannot run here is a typed refusal', async () => {
    assert.deepEqual((await api.http('GET', '/v1/machines')).json, { machines: [] });
    const small = await api.http('POST', '/v1/machines', { body: { memoryMb: 1 } });
    assert.deepEqual([small.status, small.json.error.code], [400, 'invalid_argument']);
    assert.match(small.json.error.message, /memoryMb/);
    const r = await api.http('POST', '/v1/machines', { body: {} });
    assert.deepEqual([r.status, r.json.error.code], [412, 'failed_precondition'], JSON.stringify(r.json));
    assert.ok(r.json.error.hint);
  });

  test('the E2B front door: its control plane on the same port, with its key and its errors', async () => {
    const list = await fetch(`${api.url}/v2/sandboxes`, { headers: { 'x-api-key': api.key } });
    assert.equal(list.status, 200);
    assert.deepEqual(await list.json(), []);
    const unknown = await fetch(`${api.url}/sandboxes/m_nothere`, { headers: { 'x-api-key': api.key } });
    assert.equal(unknown.status, 404);
    const noKey = await fetch(`${api.url}/v2/sandboxes`);
    assert.equal(noKey.status, 401);
  });

  test('the OpenAPI document is served', async () => {
    const doc = await api.http('GET', '/v1/openapi.json');
    assert.equal(doc.status, 200);
    assert.ok(doc.json.paths['/v1/contexts/{name}/exec'], 'exec is documented');
  });
});
