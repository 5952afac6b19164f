import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { startTestServer, type TestServer } from './harness.ts';

describe('HTTP API: auth, errors and contexts', () => {
  let t: TestServer;
  before(async () => { t = await startTestServer(); });
  after(async () => { await t?.close(); });

  test('healthz needs no key', async () => {
    const r = await t.http('GET', '/healthz', { key: null });
    assert.equal(r.status, 200);
    assert.equal(r.json.ok, true);
    assert.ok(['kvm', 'tcg', null].includes(r.json.machines.accel), 'it names the machines\' accelerator');
  });

  test('every /v1 route refuses a missing or wrong key with 401', async () => {
    const routes: [string, string, unknown?][] = [
      ['GET', '/v1/contexts'], ['POST', '/v1/contexts', { name: 'x' }], ['GET', '/v1/contexts/x'],
      ['DELETE', '/v1/contexts/x'], ['POST', '/v1/contexts/x/exec', { command: 'true' }],
      ['GET', '/v1/contexts/x/versions'], ['POST', '/v1/contexts/x/fork', { name: 'y' }],
      ['GET', '/v1/openapi.json'], ['GET', '/v1/nothing-here'],
    ];
    for (const [method, url, body] of routes) {
      for (const key of [null, 'sb_wrong', '']) {
        const r = await t.http(method, url, { body, key });
        assert.equal(r.status, 401, `${method} ${url} key=${key}`);
        assert.equal(r.json.error.code, 'unauthorized');
        assert.ok(r.json.error.hint);
      }
    }
    assert.deepEqual((await t.http('GET', '/v1/contexts')).json.contexts, [], 'nothing was created');
  });

  test('contexts: create, get, list, duplicate, delete', async () => {
    const c = await t.http('POST', '/v1/contexts', { body: { name: 'alpha' } });
    assert.equal(c.status, 201);
    assert.equal(c.json.name, 'alpha');
    assert.equal(c.json.image, 'debian');
    assert.match(c.json.head, /^v_debian_/);
    const dup = await t.http('POST', '/v1/contexts', { body: { name: 'alpha' } });
    assert.equal(dup.status, 409);
    assert.equal(dup.json.error.code, 'already_exists');
    assert.equal((await t.http('GET', '/v1/contexts/alpha')).json.head, c.json.head);
    assert.deepEqual((await t.http('GET', '/v1/contexts')).json.contexts.map((x: { name: string }) => x.name), ['alpha']);
    assert.equal((await t.http('DELETE', '/v1/contexts/alpha')).status, 204);
    assert.equal((await t.http('GET', '/v1/contexts/alpha')).status, 404);
    assert.equal((await t.http('DELETE', '/v1/contexts/alpha')).json.error.code, 'not_found');
  });

  test('bad input gets 400/404/413 with a hint and changes nothing', async () => {
    const bad: [string, string, unknown, number, string?][] = [
      ['POST', '/v1/contexts', { name: '.hidden' }, 400],
      ['POST', '/v1/contexts', { name: 'a/b' }, 400],
      ['POST', '/v1/contexts', { name: 'x'.repeat(129) }, 400],
      ['POST', '/v1/contexts', { name: 'ok', extra: 1 }, 400, 'extra'],
      ['POST', '/v1/contexts', { name: 'ok', image: 'Not An Image!' }, 400],
      ['POST', '/v1/contexts', { name: 'ok', image: 'nope' }, 404],
      ['POST', '/v1/contexts', { name: 'ok', from: { context: 'missing' } }, 404],
      ['POST', '/v1/contexts/ok/exec', { command: 'true', timeoutMs: 0 }, 400],
      ['POST', '/v1/contexts/ok/exec', { argv: ['echo', 'a\u0000b'] }, 400],
      ['POST', '/v1/contexts/ok/exec', { command: 'true', timeoutMs: 10_000_000 }, 400],
      ['POST', '/v1/contexts/ok/exec', { command: 'true', limits: { memoryMb: 1e9 } }, 400],
      ['POST', '/v1/contexts/ok/exec', { command: 'true', limits: { pids: -1 } }, 400],
      ['POST', '/v1/contexts/ok/exec', { command: 'true', limits: { bogus: 1 } }, 400, 'bogus'],
      ['POST', '/v1/contexts/ok/exec', { command: 'true', version: 'v_nope' }, 404],
      ['POST', '/v1/contexts/ok/exec', { command: 'true', cwd: 'relative' }, 400],
      ['POST', '/v1/contexts/ok/exec', { command: 'true', env: { 'A=B': 'x' } }, 400],
      ['POST', '/v1/contexts/ok/exec', {}, 400],
      ['POST', '/v1/contexts/ok/exec', { command: 'true', argv: ['true'] }, 400],
      ['POST', '/v1/contexts/ok/exec', { command: 'true', commit: 'sometimes' }, 400],
      ['POST', '/v1/contexts/.bad/exec', { command: 'true' }, 400],
      ['GET', '/v1/contexts/ok/versions?limit=0', undefined, 400],
      ['POST', '/v1/contexts/ok/fork', { name: 'f' }, 404],
    ];
    for (const [method, url, body, status, mention] of bad) {
      const r = await t.http(method, url, { body });
      assert.equal(r.status, status, `${method} ${url} ${JSON.stringify(body)}: ${r.text}`);
      assert.ok(r.json.error.code && r.json.error.message, r.text);
      if (status === 400) assert.ok(r.json.error.hint, `hint for ${JSON.stringify(body)}`);
      if (mention) assert.match(r.json.error.message, new RegExp(mention));
    }
    const broken = await t.http('POST', '/v1/contexts', { raw: '{"name":' });
    assert.equal(broken.status, 400);
    assert.deepEqual((await t.http('GET', '/v1/contexts')).json.contexts, [], 'no context was created by bad input');
  });

  test('bodies over 10 MiB get 413', async () => {
    const r = await t.http('POST', '/v1/contexts/big/exec', { raw: JSON.stringify({ command: 'true', stdin: 'x'.repeat(11 << 20) }) });
    assert.equal(r.status, 413);
    assert.equal(r.json.error.code, 'payload_too_large');
    assert.equal((await t.http('GET', '/v1/contexts/big')).status, 404);
  });

  test('GET /metrics counts queries by outcome, in Prometheus format', async () => {
    const count = async (labels: string) => {
      const r = await t.http('GET', '/metrics', { key: null });
      assert.equal(r.status, 200);
      const line = r.text.split('\n').find((l) => l.startsWith(`shellbase_queries_total{${labels}}`));
      return line ? Number(line.split(' ').pop()) : 0;
    };
    const ok = await count('outcome="ok",commit="committed"');
    const failed = await count('outcome="failed",commit="nothing"');
    await t.sb.context('metered').exec('echo x > /x');
    await t.sb.context('metered').exec('exit 3');
    assert.equal(await count('outcome="ok",commit="committed"'), ok + 1);
    assert.equal(await count('outcome="failed",commit="nothing"'), failed + 1);
    assert.match((await t.http('GET', '/metrics', { key: null })).text, /shellbase_query_duration_seconds_bucket/);
  });

  test('openapi document lists the routes', async () => {
    const r = await t.http('GET', '/v1/openapi.json');
    assert.equal(r.status, 200);
    for (const p of ['/v1/contexts', '/v1/contexts/{name}/exec', '/v1/contexts/{name}/fork', '/v1/contexts/{name}/versions']) {
      assert.ok(r.json.paths[p], p);
    }
  });
});
