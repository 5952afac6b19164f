import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, test } from 'node:test';
import { Sandbox, Volume } from 'e2b';
import { closeWithSandboxes, startTestServer, until, type TestServer } from './harness.ts';

// Contexts mounted into machines: copied into the guest at a path at create, a writable one's
// changes committed into its context (on request, on the machine's commit, and before it
// hibernates, stops or goes), each fork committing on its own; E2B's volumeMounts on top.
describe('machines: mounts', { timeout: 600_000 }, () => {
  let t: TestServer;
  const made: { kill(): Promise<unknown> }[] = [];
  const saved = { ...process.env };
  before(async () => {
    t = await startTestServer();
    // Volumes: empty contexts with a few files (a machine's mount copies the whole tree in).
    for (const name of ['vol', 'ro']) await t.sb.contexts.create({ name, empty: true });
    await t.sb.context('vol').files.write('/data/a.txt', 'one\n');
    await t.sb.context('vol').files.write('/data/keep.txt', 'keep\n');
    await t.sb.context('ro').files.write('/ref/r.txt', 'reference\n');
    Object.assign(process.env, { E2B_API_URL: t.server.url, E2B_SANDBOX_URL: t.server.url, E2B_VOLUME_API_URL: t.server.url, E2B_API_KEY: t.key, E2B_DOMAIN: 'e2b.test' });
  });
  after(async () => {
    process.env = saved;
    await closeWithSandboxes(t, made);
  });

  const files = async (ctx: string, dir: string) => {
    const r = await t.http('GET', `/v1/contexts/${ctx}/files${dir}`);
    return (r.json.entries as { name: string }[]).map((e) => e.name).sort();
  };

  test('copied in at create; a writable mount commits what the guest changed, rebased past a query sharing the volume; a read-only one refuses writes', async () => {
    const volHead = (await t.sb.contexts.get('vol')).head;
    const m = await t.sb.machines.create({ mounts: [{ context: 'vol', path: '/mnt/vol' }, { context: 'ro', path: '/mnt/ro', readOnly: true }] });
    made.push({ kill: () => m.remove() });
    const info = await m.info();
    assert.deepEqual(info.mounts, [{ context: 'vol', path: '/mnt/vol', readOnly: false, version: volHead }, { context: 'ro', path: '/mnt/ro', readOnly: true, version: (await t.sb.contexts.get('ro')).head }]);
    const r = await m.exec('cat /mnt/vol/data/a.txt /mnt/ro/ref/r.txt; echo x > /mnt/ro/ref/x 2>/dev/null || echo refused; echo two > /mnt/vol/data/b.txt; rm /mnt/vol/data/a.txt');
    assert.equal(r.stdout, 'one\nreference\nrefused\n', r.stderr);
    // A query writes another file of the volume meanwhile.
    const q = await t.sb.context('q').exec('echo from-query > /mnt/v/data/q.txt', { mounts: [{ context: 'vol', path: '/mnt/v' }] });
    assert.equal(q.exitCode, 0, q.stderr);
    assert.ok(q.mounts![0].committed);
    const v = await m.commitMount('/mnt/vol');
    assert.equal((await t.sb.contexts.get('vol')).head, v);
    assert.deepEqual(await files('vol', '/data'), ['b.txt', 'keep.txt', 'q.txt'], 'the guest\'s changes rebased past the query\'s');
    assert.equal((await m.info()).mounts![0].version, v, 'the machine\'s copy now holds that version');
    // Nothing more changed: a second commit makes no version (here through the CLI).
    const cli = await promisify(execFile)(process.execPath, [path.resolve('packages/cli/dist/main.js'), 'machine', 'commit-mount', m.id, '/mnt/vol'], {
      env: { ...process.env, SHELLBASE_URL: t.server.url, SHELLBASE_API_KEY: t.key },
    });
    assert.equal(cli.stdout.trim(), v);
    const bad = await t.http('POST', `/v1/machines/${m.id}/mounts/${encodeURIComponent('/mnt/ro')}/commit`);
    assert.equal(bad.status, 400, bad.text);
    assert.equal((await t.http('POST', `/v1/machines/${m.id}/mounts/${encodeURIComponent('/mnt/none')}/commit`)).status, 404);
    // The machine's own commit leaves its mounts out, and commits them first.
    await m.exec('echo three > /mnt/vol/data/c.txt && echo own > /root/own.txt');
    await m.commit('mach');
    assert.ok((await files('mach', '/root')).includes('own.txt'));
    assert.equal((await t.sb.context('mach').exec('test -e /mnt/vol && echo there || echo absent', { commit: 'never' })).stdout, 'absent\n');
    assert.ok((await files('vol', '/data')).includes('c.txt'), 'the mount was committed with it');
    // A fork commits on its own; deleting the source commits what it left.
    const [f] = await m.fork();
    made.push({ kill: () => f.remove() });
    await f.exec('echo fork > /mnt/vol/data/fork.txt');
    await m.exec('echo source > /mnt/vol/data/source.txt');
    await f.commitMount('/mnt/vol');
    await m.remove();
    assert.deepEqual(await files('vol', '/data'), ['b.txt', 'c.txt', 'fork.txt', 'keep.txt', 'q.txt', 'source.txt']);
  });

  test('an idle machine commits its writable mounts before it hibernates', async () => {
    await t.sb.contexts.create({ name: 'idle-vol', empty: true });
    await t.sb.context('idle-vol').files.write('/d/.keep', '');
    const m = await t.sb.machines.create({ idleTimeoutMs: 1500, mounts: [{ context: 'idle-vol', path: '/mnt/idle' }] });
    made.push({ kill: () => m.remove() });
    await m.exec('echo idle > /mnt/idle/d/written');
    await until('the machine hibernates', async () => (await m.info()).state === 'hibernated', 60_000);
    assert.equal((await t.sb.context('idle-vol').files.read('/d/written')).toString(), 'idle\n');
    assert.equal((await m.info()).mounts![0].version, (await t.sb.contexts.get('idle-vol')).head);
  });

  test('bad mounts make no machine', async () => {
    const before = (await t.sb.machines.list()).length;
    for (const [mounts, status] of [[[{ context: 'missing', path: '/mnt/x' }], 404], [[{ context: 'vol', path: '/run/x' }], 400], [[{ context: 'vol', path: '/proc' }], 400], [[{ context: 'vol', path: '/var/lib' }], 400]] as const) {
      const r = await t.http('POST', '/v1/machines', { body: { mounts } });
      assert.equal(r.status, status, r.text);
    }
    assert.equal((await t.sb.machines.list()).length, before);
  });

  test('E2B: Sandbox.create with volumeMounts; what the sandbox writes is in the volume once it is killed', async () => {
    const volume = await Volume.create('e2b-data');
    await volume.writeFile('/seed.txt', 'seed\n');
    const sbx = await Sandbox.create({ volumeMounts: { '/mnt/data': volume } });
    made.push(sbx);
    assert.equal(await sbx.files.read('/mnt/data/seed.txt'), 'seed\n');
    await sbx.files.write('/mnt/data/out.txt', 'from the sandbox\n');
    await sbx.kill();
    assert.equal(await volume.readFile('/out.txt'), 'from the sandbox\n');
    assert.ok((await t.sb.context('e2b-data').versions()).some((v) => /changes of machine/.test(v.cause.command ?? '')));
  });
});
