import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Volume, VolumeError, VolumeFileType, VolumeNotFoundError, VolumePathNotFoundError } from 'e2b';
import { Shellbase } from '@shellbase/sdk';
import { startTestServer, type TestServer } from './harness.ts';

// E2B's Volume API through the unmodified `e2b` SDK: a volume is a context of the tenant, its
// content calls are files API calls, each write a version of it.
describe('E2B volumes through the E2B SDK', () => {
  let t: TestServer;
  const saved = { ...process.env };
  before(async () => {
    t = await startTestServer();
    Object.assign(process.env, { E2B_API_URL: t.server.url, E2B_VOLUME_API_URL: t.server.url, E2B_API_KEY: t.key, E2B_DOMAIN: 'localhost' });
  });
  after(async () => {
    process.env = saved;
    await t?.close();
  });

  test('create, list, getInfo, connect, destroy; the volume is a context with history', async () => {
    const vol = await Volume.create('datasets');
    assert.equal(vol.volumeId, 'datasets');
    assert.equal(vol.name, 'datasets');
    assert.match(vol.token, /^sbv\./);
    assert.deepEqual((await Volume.list()).map((v) => v.name), ['datasets'], 'only volumes are listed, not every context');
    await t.sb.context('not-a-volume').files.write('/root/x', 'x');
    assert.deepEqual((await Volume.list()).map((v) => v.name), ['datasets']);
    const info = await Volume.getInfo(vol.volumeId);
    assert.deepEqual([info.volumeId, info.name, info.token], [vol.volumeId, vol.name, vol.token]);
    assert.deepEqual(await vol.list('/'), [], 'a new volume is empty');
    assert.equal((await t.sb.contexts.get('datasets')).name, 'datasets', 'and a context of the tenant');
    await assert.rejects(Volume.getInfo('not-a-volume'), VolumeNotFoundError);
    await assert.rejects(Volume.create('datasets'), VolumeError);
    assert.equal(await Volume.destroy('datasets'), true);
    assert.equal(await Volume.destroy('datasets'), false);
    await assert.rejects(Volume.connect('datasets'), VolumeNotFoundError);
  });

  test('content calls: write, read, list (with depth), getInfo, exists, makeDir, updateMetadata, remove', async () => {
    const vol = await Volume.create('work');
    const w = await vol.writeFile('/data/a.txt', 'alpha\n');
    assert.deepEqual([w.name, w.path, w.type, w.size, w.uid, w.gid], ['a.txt', '/data/a.txt', VolumeFileType.FILE, 6, 1000, 1000], 'E2B\'s default user owns what it writes');
    assert.ok(w.mtime instanceof Date && !Number.isNaN(w.mtime.getTime()));
    assert.equal(await vol.readFile('/data/a.txt'), 'alpha\n');
    assert.deepEqual(Buffer.from(await vol.readFile('/data/a.txt', { format: 'bytes' })).toString(), 'alpha\n');
    await vol.writeFile('/data/a.txt', 'beta\n', { mode: 0o600, uid: 1000, gid: 1000 });
    const a = await vol.getInfo('/data/a.txt');
    assert.deepEqual([a.mode, a.uid, a.gid, a.size], [0o600, 1000, 1000, 5]);
    const d = await vol.makeDir('/data/sub/deeper', { force: true, mode: 0o750, uid: 0, gid: 0 });
    assert.deepEqual([d.type, d.mode, d.uid], [VolumeFileType.DIRECTORY, 0o750, 0]);
    await assert.rejects(vol.makeDir('/nowhere/x'), VolumePathNotFoundError, 'a missing parent without force');
    await assert.rejects(vol.writeFile('/data/x', 'x', { uid: 65536 }), VolumeError, 'an id no sandbox has');
    await assert.rejects(vol.updateMetadata('/data/a.txt', { mode: 0o170000 }), VolumeError, 'not a mode');
    await assert.rejects(vol.makeDir('/data/sub'), VolumeError, 'an existing path without force');
    assert.deepEqual((await vol.list('/data')).map((e) => [e.name, e.type]), [['a.txt', 'file'], ['sub', 'directory']]);
    assert.deepEqual((await vol.list('/data', { depth: 2 })).map((e) => e.path), ['/data/a.txt', '/data/sub', '/data/sub/deeper']);
    const m = await vol.updateMetadata('/data/a.txt', { mode: 0o644, uid: 0 });
    assert.deepEqual([m.mode, m.uid, m.gid], [0o644, 0, 1000]);
    assert.equal(await vol.readFile('/data/a.txt'), 'beta\n', 'its content stays');
    assert.equal(await vol.exists('/data/a.txt'), true);
    await vol.remove('/data/sub');
    assert.equal(await vol.exists('/data/sub'), false);
    await assert.rejects(vol.readFile('/missing'), VolumePathNotFoundError);
    await assert.rejects(vol.remove('/missing'), VolumePathNotFoundError);
    // Every write is a version of the context: its history shows them.
    const versions = await t.sb.context('work').versions();
    assert.ok(versions.length >= 7, `${versions.length} versions`);
    // A query of shellbase's own sees the volume mounted with the same files.
    const r = await t.sb.context('reader').exec('cat /mnt/work/data/a.txt', { mounts: [{ context: 'work', path: '/mnt/work', readOnly: true }] });
    assert.equal(r.stdout, 'beta\n', r.stderr);
  });

  test('the content token is the volume\'s own: another volume\'s, a made-up one and another tenant\'s key are refused', async () => {
    const one = await Volume.create('one');
    const two = await Volume.create('two');
    await one.writeFile('/f', 'one');
    const wrong = new Volume(one.volumeId, one.name, two.token);
    await assert.rejects(wrong.readFile('/f'), (e: Error) => /401|token/i.test(e.message));
    const madeUp = new Volume(one.volumeId, one.name, `sbv.${Buffer.from('t_nobody').toString('base64url')}.abc`);
    await assert.rejects(madeUp.readFile('/f'), (e: Error) => /401|token/i.test(e.message));
    const { apiKey } = await t.sb.tenants.create('e2b-other');
    await assert.rejects(Volume.getInfo('one', { apiKey }), VolumeNotFoundError, 'another tenant does not see it');
    assert.deepEqual(await Volume.list({ apiKey }), []);
    const mine = new Shellbase({ url: t.server.url, apiKey });
    await assert.rejects(mine.context('x').exec('true', { mounts: [{ context: 'one', path: '/mnt/one' }] }), /does not exist/);
  });
});
