import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { CommandExitError, Sandbox, SandboxError, TimeoutError, type SandboxInfo, type SandboxOpts } from 'e2b';
import { e2bSignature } from '@shellbase/server';
import { closeWithSandboxes, startTestServer, until, type TestServer } from './harness.ts';

// The unmodified `e2b` SDK against a real server, machines under TCG: listing and paging, pause
// without memory (resumed by a boot from the sandbox's disk), a finished command's result across a
// pause, commands of a killed sandbox, and MCP gateways. At most two VMs run at once; every
// sandbox is killed in the end, failures included (and the server's close ends any VM left).
// Lifecycle events: E2B's events API and a webhook registered in E2B's shape, its receiver on
// 127.0.0.2 (the one address the server lets through as if it were the internet).
const UPSTREAM = '127.0.0.2';


/** Every page of a listing: the sandboxes' ids, page by page (the paginator's `hasNext` false at the end). */
async function pages(list: ReturnType<typeof Sandbox.list>, between?: (page: number) => Promise<void>): Promise<string[][]> {
  const out: string[][] = [];
  while (list.hasNext) {
    out.push((await list.nextItems()).map((s: SandboxInfo) => s.sandboxId));
    if (out.length > 20) throw new Error('the listing does not end');
    if (list.hasNext) await between?.(out.length);
  }
  assert.equal(list.nextToken, undefined, 'no token after the last page');
  return out;
}

describe('the E2B SDK against shellbase: lifecycle', { timeout: 900_000 }, () => {
  let t: TestServer;
  const made: Sandbox[] = [];
  const create = async (opts?: SandboxOpts) => {
    const s = await Sandbox.create(opts);
    made.push(s);
    return s;
  };
  /** The files a hibernation with memory keeps in the machine's run directory. */
  const savedState = (id: string) => existsSync(path.join(t.home, 'machines', 'run', id, 'state.bin'));
  const bootId = async (s: Sandbox) => (await s.commands.run('cat /proc/sys/kernel/random/boot_id')).stdout.trim();

  let receiver: Server;
  const received: { headers: IncomingHttpHeaders; body: string }[] = [];

  before(async () => {
    receiver = createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => { body += c.toString(); });
      req.on('end', () => { received.push({ headers: req.headers, body }); res.writeHead(200).end(); });
    });
    await new Promise<void>((resolve) => receiver.listen(0, UPSTREAM, resolve));
    t = await startTestServer({ egress: { default: { egress: 'public' }, allowCidrs: [`${UPSTREAM}/32`], hosts: {}, maxPerSandbox: 8, maxPerTenant: 1024, logDays: 7 } });
    Object.assign(process.env, { E2B_API_URL: t.server.url, E2B_SANDBOX_URL: t.server.url, E2B_API_KEY: t.key, E2B_DOMAIN: 'e2b.test' });
  });

  after(async () => {
    try {
      await closeWithSandboxes(t, made);
    } finally {
      await new Promise((r) => receiver.close(r));
    }
  });

  test('lifecycle events: E2B\'s events API and an E2B webhook see created, updated, paused, resumed and killed, signed', async () => {
    const api = (method: string, p: string, body?: unknown) => fetch(`${t.server.url}${p}`, {
      method, headers: { 'x-api-key': t.key, ...(body ? { 'content-type': 'application/json' } : {}) }, ...(body ? { body: JSON.stringify(body) } : {}),
    });
    const port = (receiver.address() as { port: number }).port;
    const types = ['sandbox.lifecycle.created', 'sandbox.lifecycle.updated', 'sandbox.lifecycle.paused', 'sandbox.lifecycle.resumed', 'sandbox.lifecycle.killed'];
    // A refused address is refused at registration.
    assert.equal((await api('POST', '/events/webhooks', { url: 'http://127.0.0.1:9/in', events: types })).status, 400);
    const reg = await api('POST', '/events/webhooks', { name: 'e2b hook', url: `http://${UPSTREAM}:${port}/in`, enabled: true, events: types, signatureSecret: 'sssh' });
    assert.equal(reg.status, 201);
    const hook = await reg.json() as { id: string; events: string[]; enabled: boolean };
    assert.deepEqual(hook.events, types);
    assert.equal((await (await api('GET', `/events/webhooks/${hook.id}`)).json() as { id: string }).id, hook.id);
    const sbx = await create({ metadata: { role: 'events' } });
    await sbx.setTimeout(120_000);
    await sbx.pause();
    await Sandbox.connect(sbx.sandboxId);
    await sbx.kill();
    const want = ['created', 'updated', 'paused', 'resumed', 'killed'];
    let events: { type: string; eventLabel: string; sandboxId: string; eventData: Record<string, unknown> }[] = [];
    await until('the five lifecycle events', async () => {
      events = await (await api('GET', `/events/sandboxes/${sbx.sandboxId}?orderAsc=true`)).json() as typeof events;
      return events.length >= 5;
    }, 60_000);
    assert.deepEqual(events.map((e) => e.type), want.map((w) => `sandbox.lifecycle.${w}`));
    assert.deepEqual(events.map((e) => e.eventLabel), ['create', 'update', 'pause', 'resume', 'kill']);
    assert.deepEqual(events[0].eventData.sandbox_metadata, { role: 'events' });
    assert.equal(typeof (events[1].eventData as { set_timeout?: string }).set_timeout, 'string');
    assert.equal((events[4].eventData as { execution: { vcpu_count: number } }).execution.vcpu_count > 0, true);
    // Newest first by default; `types` filters before `limit`.
    const killedOnly = await (await api('GET', `/events/sandboxes?types=sandbox.lifecycle.killed&limit=1`)).json() as { sandboxId: string; type: string }[];
    assert.deepEqual(killedOnly.map((e) => [e.sandboxId, e.type]), [[sbx.sandboxId, 'sandbox.lifecycle.killed']]);
    // The webhook got each, in E2B's payload, with e2b-signature over the body.
    await until('five deliveries', () => received.filter((r) => JSON.parse(r.body).sandboxId === sbx.sandboxId).length >= 5, 60_000);
    const mine = received.filter((r) => JSON.parse(r.body).sandboxId === sbx.sandboxId);
    assert.deepEqual(mine.map((r) => JSON.parse(r.body).type).sort(), [...types].sort());
    for (const r of mine) {
      assert.equal(r.headers['e2b-webhook-id'], hook.id);
      assert.equal(r.headers['e2b-signature-version'], 'v1');
      assert.equal(r.headers['e2b-signature'], e2bSignature('sssh', r.body));
    }
    assert.equal((await api('PATCH', `/events/webhooks/${hook.id}`, { enabled: false })).status, 200);
    assert.equal((await (await api('GET', '/events/webhooks')).json() as { enabled: boolean }[])[0].enabled, false);
    assert.equal((await api('DELETE', `/events/webhooks/${hook.id}`)).status, 200);
    assert.equal((await api('GET', `/events/webhooks/${hook.id}`)).status, 404);
  });

  test('list pages newest first, filters before paging, and ends; a create while paging is not listed twice', async () => {
    const query = { metadata: { suite: 'list' } };
    const a = await create({ metadata: { suite: 'list', n: 'a' } });
    const b = await create({ metadata: { suite: 'list', n: 'b' } });
    assert.equal(await b.pause(), true);
    let c: Sandbox | null = null;
    // A sandbox made between two pages is newer than the cursor: the pages go on where they were.
    const seen = await pages(Sandbox.list({ query, limit: 1 }), async () => { c ??= await create({ metadata: { suite: 'list', n: 'c' } }); });
    assert.deepEqual(seen, [[b.sandboxId], [a.sandboxId]]);
    assert.ok(c);
    const cid = (c as Sandbox).sandboxId;
    assert.deepEqual(await pages(Sandbox.list({ query, limit: 1 })), [[cid], [b.sandboxId], [a.sandboxId]]);
    assert.deepEqual(await pages(Sandbox.list({ query, limit: 2 })), [[cid, b.sandboxId], [a.sandboxId]]);
    assert.deepEqual(await pages(Sandbox.list({ query, limit: 3 })), [[cid, b.sandboxId, a.sandboxId]]);
    assert.deepEqual(await pages(Sandbox.list({ query, limit: 1, order: 'asc' })), [[a.sandboxId], [b.sandboxId], [cid]]);
    // The state filter applies before paging: two running sandboxes are two pages of one, then the end.
    assert.deepEqual(await pages(Sandbox.list({ query: { ...query, state: ['running'] }, limit: 1 })), [[cid], [a.sandboxId]]);
    assert.deepEqual(await pages(Sandbox.list({ query: { ...query, state: ['paused'] }, limit: 1 })), [[b.sandboxId]]);
    assert.deepEqual(await pages(Sandbox.list({ query: { ...query, state: ['running', 'paused'] }, limit: 2 })), [[cid, b.sandboxId], [a.sandboxId]]);
    assert.deepEqual(await pages(Sandbox.list({ query: { metadata: { suite: 'list', n: 'b' } }, limit: 1 })), [[b.sandboxId]]);
    // Sorted by start time (then id), newest first.
    const listed = await Sandbox.list({ query }).nextItems();
    assert.deepEqual(listed.map((s) => s.sandboxId), [cid, b.sandboxId, a.sandboxId]);
    const started = listed.map((s) => s.startedAt.getTime());
    assert.deepEqual([...started].sort((x, y) => y - x), started);
    // A token is the listing's own: one it did not make is a 400.
    await assert.rejects(Sandbox.list({ query, nextToken: 'not-a-token' }).nextItems(), (e: unknown) => e instanceof SandboxError && /400: .*nextToken/.test(e.message));
    for (const s of [a, b, c as Sandbox]) await s.kill();
  });

  test('pause without memory keeps the disk; connect boots the sandbox again from it, its processes gone', async () => {
    const s = await create({ envs: { FROM_CREATE: 'yes' } });
    await s.files.write('kept/notes.txt', 'on the disk');
    const sleeper = await s.commands.run('sleep 3600', { background: true, timeoutMs: 0 });
    const done = await s.commands.run('echo finished; exit 5', { background: true });
    await until('the short command to end', async () => !(await s.commands.list()).some((p) => p.pid === done.pid), 60_000);
    const booted = await bootId(s);
    assert.equal(await s.pause({ keepMemory: false }), true);
    assert.equal(await s.pause({ keepMemory: false }), false, 'paused already');
    assert.equal((await s.getInfo()).state, 'paused');
    assert.equal((await t.sb.machines.get(s.sandboxId).info()).state, 'hibernated');
    assert.equal(savedState(s.sandboxId), false, 'no memory kept');
    assert.equal(await s.isRunning(), false);
    await assert.rejects(s.commands.run('true'));
    assert.deepEqual((await Sandbox.list({ query: { state: ['paused'] } }).nextItems()).map((x) => x.sandboxId), [s.sandboxId]);
    const back = await Sandbox.connect(s.sandboxId);
    assert.equal((await back.getInfo()).state, 'running');
    assert.notEqual(await bootId(back), booted, 'booted again');
    assert.equal(await back.files.read('kept/notes.txt'), 'on the disk');
    assert.equal((await back.commands.list()).some((p) => p.pid === sleeper.pid), false, 'its processes are gone');
    assert.equal((await back.commands.run('echo $FROM_CREATE; id -un')).stdout, 'yes\nuser\n');
    // The create-time envs' file in the guest's /run is there again after the boot.
    assert.match((await back.commands.run('cat /run/shellbase/sandbox-envs.json', { user: 'root' })).stdout, /"FROM_CREATE":"yes"/);
    // A command that ended before the pause keeps its result; one that ran was broken off by the pause.
    const e = await done.wait().then(() => null, (x: unknown) => x);
    assert.ok(e instanceof CommandExitError, String(e));
    assert.deepEqual([e.exitCode, e.stdout], [5, 'finished\n']);
    await assert.rejects(sleeper.wait(), TimeoutError);
    // With memory, the next pause and resume keep the boot.
    assert.equal(await back.pause(), true);
    assert.equal(savedState(s.sandboxId), true);
    const again = await Sandbox.connect(s.sandboxId);
    assert.equal(await bootId(again), await bootId(back));
    await again.kill();
  });

  test('a timeout that pauses without memory (onTimeout keepMemory: false), also of a sandbox hibernated while idle', async () => {
    const s = await create({ timeoutMs: 120_000, lifecycle: { onTimeout: { action: 'pause', keepMemory: false } } });
    assert.deepEqual((await s.getInfo()).lifecycle, { onTimeout: 'pause', autoResume: false });
    // Hibernated as an idle machine is (with its memory), it is still running to E2B.
    await t.sb.machines.get(s.sandboxId).hibernate();
    assert.equal(savedState(s.sandboxId), true);
    assert.equal((await s.getInfo()).state, 'running');
    await s.setTimeout(1000);
    await until('the pause at the timeout', async () => (await s.getInfo()).state === 'paused', 60_000);
    await until('the machine to hibernate', async () => (await t.sb.machines.get(s.sandboxId).info()).state === 'hibernated', 60_000);
    assert.equal(savedState(s.sandboxId), false, 'no memory kept');
    await s.kill();
    // autoResume with a timeout that pauses without memory: the SDK refuses it, and so does the API.
    const r = await fetch(`${t.server.url}/v2/sandboxes`, {
      method: 'POST', headers: { 'x-api-key': t.key, 'content-type': 'application/json' },
      body: JSON.stringify({ autoPause: true, autoPauseMemory: false, autoResume: { enabled: true } }),
    });
    assert.equal(r.status, 400, await r.text());
  });

  test('a background command that finished before a pause keeps its result across the pause', async () => {
    const s = await create();
    const h = await s.commands.run('echo out; echo err >&2; exit 7', { background: true });
    await until('the command to end', async () => !(await s.commands.list()).some((p) => p.pid === h.pid), 60_000);
    const running = await s.commands.run('sleep 3600', { background: true, timeoutMs: 0 });
    const broken = running.wait().then(() => null, (x: unknown) => x);
    assert.equal(await s.pause(), true);
    assert.equal((await s.getInfo()).state, 'paused');
    const back = await Sandbox.connect(s.sandboxId);
    assert.equal((await back.getInfo()).state, 'running');
    const e = await h.wait().then(() => null, (x: unknown) => x);
    assert.ok(e instanceof CommandExitError, String(e));
    assert.deepEqual([e.exitCode, e.stdout, e.stderr], [7, 'out\n', 'err\n']);
    assert.equal((await back.commands.list()).some((p) => p.pid === h.pid), false);
    // A command that ran at the pause: its stream broke off as a paused E2B sandbox's does; the process runs on.
    const b = await broken;
    assert.ok(b instanceof TimeoutError, String(b));
    assert.match(b.message, /The sandbox was killed or reached its end of life while the request was in flight/);
    assert.ok((await back.commands.list()).some((p) => p.pid === running.pid), 'the process survived the pause');
    await back.kill();
  });

  test('a command running when its sandbox is killed, or reaches its timeout, ends with the SDK\'s error for it', async () => {
    for (const end of ['kill', 'timeout'] as const) {
      const s = await create();
      const bg = await s.commands.run('sleep 3600', { background: true, timeoutMs: 0 });
      const fg = s.commands.run('sleep 3600', { timeoutMs: 0 }).then(() => null, (x: unknown) => x);
      await until('both commands', async () => (await s.commands.list()).length >= 2, 60_000);
      if (end === 'kill') await Sandbox.kill(s.sandboxId);
      else await s.setTimeout(1000);
      for (const e of [await bg.wait().then(() => null, (x: unknown) => x), await fg]) {
        assert.ok(e instanceof TimeoutError, `${end}: ${String(e)}`);
        assert.match(e.message, /The sandbox was killed or reached its end of life while the request was in flight/);
      }
      await until('the sandbox to be gone', async () => !(await Sandbox.list().nextItems()).some((x) => x.sandboxId === s.sandboxId), 60_000);
    }
  });

  test('an MCP gateway is refused before anything is made, in the error the SDK raises for a gateway that does not start', async () => {
    const before = (await t.sb.machines.list()).length;
    const e = await Sandbox.create({ mcp: { exa: { apiKey: 'x' } } }).then((s) => { made.push(s); return null; }, (x: unknown) => x);
    assert.ok(e instanceof SandboxError, String(e));
    assert.match(e.message, /^400: MCP gateways are not supported by shellbase/);
    assert.equal(e.statusCode, 400);
    assert.equal((await t.sb.machines.list()).length, before);
  });
});
