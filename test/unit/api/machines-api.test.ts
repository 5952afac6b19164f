import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { fastApi, type FastApi } from './fast-api.ts';

/** The machine routes over real HTTP, with machines on in-memory VMs (fast-api.ts `vms`). */
describe('machines API over in-memory VMs', () => {
  let api: FastApi;
  before(async () => { api = await fastApi({}, { vms: true }); });
  after(async () => { await api?.close(); });

  test('create, exec, files, lifecycle steps, delete: statuses and the error wire form', async () => {
    const made = await api.http('POST', '/v1/machines', { body: { memoryMb: 256 } });
    assert.equal(made.status, 201, JSON.stringify(made.json));
    const { id } = made.json;
    assert.deepEqual([made.json.state, made.json.memoryMb, made.json.image], ['running', 256, 'debian']);
    assert.deepEqual((await api.http('GET', '/v1/machines')).json.machines.map((m: { id: string }) => m.id), [id]);
    const r = await api.http('POST', `/v1/machines/${id}/exec`, { body: { command: 'cat /etc/motd; echo oops >&2; exit 2' } });
    assert.deepEqual([r.status, r.json.exitCode, r.json.stdout, r.json.stderr], [200, 2, 'hello\n', 'oops\n']);

    const put = await fetch(`${api.url}/v1/machines/${id}/files/srv/a.txt?mode=0600`, { method: 'PUT', headers: { authorization: `Bearer ${api.key}`, 'content-type': 'application/octet-stream' }, body: 'via http' });
    assert.equal(put.status, 204);
    const got = await fetch(`${api.url}/v1/machines/${id}/files/srv/a.txt`, { headers: { authorization: `Bearer ${api.key}` } });
    assert.equal(await got.text(), 'via http');
    assert.deepEqual((await api.http('GET', `/v1/machines/${id}/files/srv`)).json, { entries: ['a.txt'] });
    assert.equal((await api.http('GET', `/v1/machines/${id}/files/nope`)).status, 404);

    assert.equal((await api.http('POST', `/v1/machines/${id}/pause`)).json.state, 'paused');
    const refused = await api.http('POST', `/v1/machines/${id}/exec`, { body: { command: 'true' } });
    assert.deepEqual([refused.status, refused.json.error.code], [412, 'failed_precondition']);
    assert.match(refused.json.error.hint, /resume/);
    assert.equal((await api.http('POST', `/v1/machines/${id}/resume`)).json.state, 'running');
    assert.equal((await api.http('POST', `/v1/machines/${id}/hibernate`)).json.state, 'hibernated');
    assert.equal((await api.http('POST', `/v1/machines/${id}/exec`, { body: { command: 'cat /srv/a.txt' } })).json.stdout, 'via http');
    assert.equal((await api.http('GET', `/v1/machines/${id}`)).json.state, 'running', 'the exec woke it');
    assert.match((await api.http('GET', `/v1/machines/${id}/console?tail=5`)).json.lines.join('\n'), /in-memory VM restored/);

    assert.equal((await api.http('DELETE', `/v1/machines/${id}`)).status, 204);
    const gone = await api.http('GET', `/v1/machines/${id}`);
    assert.deepEqual([gone.status, gone.json.error.code], [404, 'not_found']);
  });

  test('fork, snapshot and restore through the routes; another tenant sees none of it', async () => {
    const { id } = (await api.http('POST', '/v1/machines', { body: {} })).json;
    await api.http('POST', `/v1/machines/${id}/exec`, { body: { command: 'echo shared > /root/f' } });
    const forked = await api.http('POST', `/v1/machines/${id}/fork`, { body: { count: 2 } });
    assert.equal(forked.status, 201);
    assert.equal(forked.json.machines.length, 2);
    const snap = await api.http('POST', `/v1/machines/${id}/snapshot`);
    assert.equal(snap.status, 200, JSON.stringify(snap.json));
    const restored = await api.http('POST', `/v1/snapshots/${snap.json.snapshot}/machines`, { body: { count: 1 } });
    assert.equal(restored.status, 201);
    for (const m of [...forked.json.machines, ...restored.json.machines]) {
      assert.equal((await api.http('POST', `/v1/machines/${m.id}/exec`, { body: { command: 'cat /root/f' } })).json.stdout, 'shared\n');
    }
    const other = await api.http('POST', '/v1/tenants', { body: { name: 'other-tenant' } });
    const key = other.json.apiKey as string;
    assert.deepEqual((await api.http('GET', '/v1/machines', { key })).json, { machines: [] });
    assert.equal((await api.http('POST', `/v1/machines/${id}/exec`, { key, body: { command: 'true' } })).status, 404);
    assert.equal((await api.http('POST', `/v1/snapshots/${snap.json.snapshot}/machines`, { key, body: {} })).status, 404);
    assert.equal((await api.http('DELETE', `/v1/snapshots/${snap.json.snapshot}`)).status, 204);
    for (const m of [{ id }, ...forked.json.machines, ...restored.json.machines]) assert.equal((await api.http('DELETE', `/v1/machines/${m.id}`)).status, 204);
  });

  test('admission over HTTP: the host\'s memory budget is a 429 with its numbers', async () => {
    const { machines } = api.fake.engine.deps.config;
    const budget = machines.memoryBudgetMb;
    machines.memoryBudgetMb = 300;
    try {
      const { id } = (await api.http('POST', '/v1/machines', { body: { memoryMb: 256 } })).json;
      const over = await api.http('POST', '/v1/machines', { body: { memoryMb: 256 } });
      assert.deepEqual([over.status, over.json.error.code], [429, 'limit_exceeded']);
      assert.deepEqual(over.json.error.details, { budgetMb: 300, usedMb: 256 });
      assert.equal((await api.http('DELETE', `/v1/machines/${id}`)).status, 204);
    } finally {
      machines.memoryBudgetMb = budget;
    }
  });
});
