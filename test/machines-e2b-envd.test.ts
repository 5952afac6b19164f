import assert from 'node:assert/strict';
import { request } from 'node:http';
import { connect } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { InvalidArgumentError, Sandbox, type FilesystemEvent } from 'e2b';
import { closeWithSandboxes, startTestServer, until, type TestServer } from './harness.ts';

// The unmodified `e2b` SDK against a real server (machines under TCG): what E2B's envd and edge do
// that the SDK relies on: the edge's 502s for guest ports, the base template's `python`, writes
// anywhere with directories made for the user, symlinks as envd describes them, and what the
// envd version the server reports turns on in the SDK (file metadata, watch events with entries,
// watching network mounts). At most two sandboxes run at once; every one is killed in the end.
const DOMAIN = 'e2b.test';


describe('envd and the edge as the E2B SDK expects them', { timeout: 600_000 }, () => {
  let t: TestServer;
  let sbx: Sandbox;
  const made: Sandbox[] = [];
  const create = async () => {
    const s = await Sandbox.create();
    made.push(s);
    return s;
  };
  /** A GET to the API port with `host` (getHost's name) as its Host. */
  const viaHost = (host: string, headers: Record<string, string> = {}) => new Promise<{ status: number; type: string; json: Record<string, unknown> }>((resolve, reject) => {
    const api = new URL(t.server.url);
    const req = request({ host: api.hostname, port: api.port, path: '/', headers: { host, ...headers }, agent: false }, (res) => {
      let body = '';
      res.on('data', (c) => { body += c; });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, type: res.headers['content-type'] ?? '', json: JSON.parse(body) as Record<string, unknown> }));
    });
    req.on('error', reject);
    req.end();
  });

  before(async () => {
    t = await startTestServer();
    Object.assign(process.env, { E2B_API_URL: t.server.url, E2B_SANDBOX_URL: t.server.url, E2B_API_KEY: t.key, E2B_DOMAIN: DOMAIN });
    sbx = await create();
  });

  after(() => closeWithSandboxes(t, made));

  test('getHost: a port nobody listens on, a paused and a killed sandbox answer 502 as E2B\'s edge does; shellbase\'s gateway keeps its 503', async () => {
    const s = await create();
    const closed = await viaHost(s.getHost(3000));
    assert.deepEqual([closed.status, closed.type], [502, 'application/json; charset=utf-8']);
    assert.deepEqual(closed.json, { code: 502, message: 'The sandbox is running but port is not open', sandboxId: s.sandboxId, port: 3000 });
    // The port named by E2B's headers (E2B_SANDBOX_URL), and a WebSocket's handshake: the same.
    const byHeaders = await fetch(`${t.server.url}/`, { headers: { 'e2b-sandbox-id': s.sandboxId, 'e2b-sandbox-port': '3000' } });
    assert.equal(byHeaders.status, 502);
    const api = new URL(t.server.url);
    const upgrade = await new Promise<string>((resolve, reject) => {
      const sock = connect(Number(api.port), api.hostname, () => sock.write(`GET / HTTP/1.1\r\nHost: ${s.getHost(3000)}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n`));
      let got = '';
      sock.on('data', (c) => { got += c; });
      sock.on('close', () => resolve(got));
      sock.on('error', reject);
    });
    assert.match(upgrade, /^HTTP\/1.1 502 /);
    // The same closed port exposed on shellbase's own gateway: its own answer, unchanged.
    const { pathUrl } = await t.sb.machines.get(s.sandboxId).expose(3000);
    assert.equal((await fetch(pathUrl)).status, 503);
    assert.equal(await s.pause(), true);
    const paused = await viaHost(s.getHost(3000));
    assert.equal(paused.status, 502);
    assert.deepEqual(paused.json, { code: 502, message: 'The sandbox was not found', sandboxId: s.sandboxId });
    await s.kill();
    const killed = await viaHost(s.getHost(3000));
    assert.deepEqual([killed.status, killed.json.message], [502, 'The sandbox was not found']);
  });

  test('the base template has `python` (python3) on PATH, as E2B\'s base image does', async () => {
    const r = await sbx.commands.run('python --version; readlink -f "$(command -v python)"');
    assert.match(r.stdout, /^Python 3\.\d+\.\d+\n\/usr\/bin\/python3\.\d+\n$/);
  });

  test('files.write of many files: relative paths in the home, absolute ones anywhere, missing directories made for the user as envd makes them', async () => {
    // The SDK's own case: an absolute path under a directory that does not exist in /.
    const infos = await sbx.files.write([
      { path: '/0/multi_test_file0.txt', data: 'zero' },
      { path: '/home/user/multi_test_file1.txt', data: 'one' },
      { path: 'multi/multi_test_file2.txt', data: 'two' },
    ]);
    assert.deepEqual(infos.map((i) => [i.name, i.type, i.path]), [
      ['multi_test_file0.txt', 'file', '/0/multi_test_file0.txt'],
      ['multi_test_file1.txt', 'file', '/home/user/multi_test_file1.txt'],
      ['multi_test_file2.txt', 'file', '/home/user/multi/multi_test_file2.txt'],
    ]);
    assert.equal(await sbx.files.read('/0/multi_test_file0.txt'), 'zero');
    assert.equal(await sbx.files.read('multi/multi_test_file2.txt'), 'two');
    assert.equal((await sbx.commands.run('stat -c "%U %G" /0 /0/multi_test_file0.txt')).stdout, 'user user\nuser user\n');
    // makeDir and rename make what is missing the same way.
    assert.equal(await sbx.files.makeDir('/made/for/user'), true);
    assert.equal((await sbx.files.rename('/0/multi_test_file0.txt', '/moved/here.txt')).path, '/moved/here.txt');
    assert.equal((await sbx.commands.run('stat -c %U /made /made/for/user /moved /moved/here.txt')).stdout, 'user\nuser\nuser\nuser\n');
    // What exists keeps the guest's permissions: the default user still cannot write into /root.
    await assert.rejects(sbx.files.write('/root/x.txt', 'no'), /Permission denied/);
    await assert.rejects(sbx.files.write([{ path: '/root/y.txt', data: 'no' }]), /Permission denied/);
  });

  test('getInfo and list describe a symlink as envd does: its target\'s type and the resolved target', async () => {
    await sbx.commands.run('mkdir -p links/dir && echo hi > links/target.txt && cd links && ln -s target.txt to-file && ln -s dir to-dir && ln -s /nowhere dangling');
    const file = await sbx.files.getInfo('links/to-file');
    assert.deepEqual([file.name, file.type, file.path, file.symlinkTarget, file.mode], ['to-file', 'file', '/home/user/links/to-file', '/home/user/links/target.txt', 0o644]);
    assert.match(file.permissions, /^L/);
    const dir = await sbx.files.getInfo('links/to-dir');
    assert.deepEqual([dir.type, dir.symlinkTarget], ['dir', '/home/user/links/dir']);
    // A link to nothing: no type (the SDK's list leaves such entries out), its own path as the target.
    const dangling = await sbx.files.getInfo('links/dangling');
    assert.deepEqual([dangling.type, dangling.symlinkTarget], [undefined, '/home/user/links/dangling']);
    const listed = await sbx.files.list('links');
    assert.deepEqual(listed.map((e) => [e.name, e.type, e.symlinkTarget]), [
      ['dir', 'dir', undefined], ['target.txt', 'file', undefined], ['to-dir', 'dir', '/home/user/links/dir'], ['to-file', 'file', '/home/user/links/target.txt'],
    ]);
  });

  test('file metadata (envd 0.6.2): written with a file, shown by getInfo, list and rename, replaced by the next write', async () => {
    const info = await sbx.files.write('meta/a.txt', 'a', { metadata: { author: 'mish', purpose: 'upload' } });
    assert.deepEqual(info.metadata, { author: 'mish', purpose: 'upload' });
    assert.deepEqual((await sbx.files.getInfo('meta/a.txt')).metadata, { author: 'mish', purpose: 'upload' });
    const octet = await sbx.files.write('meta/b.txt', 'b', { metadata: { stage: 'octet' }, useOctetStream: true });
    assert.deepEqual(octet.metadata, { stage: 'octet' });
    const many = await sbx.files.writeFiles([{ path: 'meta/c.txt', data: 'c' }, { path: 'meta/d.txt', data: 'd' }], { metadata: { source: 'suite' } });
    assert.deepEqual(many.map((i) => i.metadata), [{ source: 'suite' }, { source: 'suite' }]);
    assert.deepEqual((await sbx.files.list('meta')).map((e) => [e.name, e.metadata]), [
      ['a.txt', { author: 'mish', purpose: 'upload' }], ['b.txt', { stage: 'octet' }], ['c.txt', { source: 'suite' }], ['d.txt', { source: 'suite' }],
    ]);
    assert.deepEqual((await sbx.files.rename('meta/a.txt', 'meta/renamed.txt')).metadata, { author: 'mish', purpose: 'upload' });
    // Overwriting replaces the set: none sent, none left.
    assert.equal((await sbx.files.write('meta/renamed.txt', 'again')).metadata, undefined);
    assert.equal((await sbx.files.getInfo('meta/renamed.txt')).metadata, undefined);
    // It is the file's user.e2b.* xattrs, whoever set them.
    await sbx.commands.run('python3 -c "import os; os.setxattr(\'meta/b.txt\', \'user.e2b.extra\', b\'set in the guest\')"');
    assert.deepEqual((await sbx.files.getInfo('meta/b.txt')).metadata, { stage: 'octet', extra: 'set in the guest' });
  });

  test('watchDir with includeEntry (envd 0.6.3): created, written and changed entries come with their EntryInfo, removed ones without', async () => {
    await sbx.files.makeDir('watched');
    const events: FilesystemEvent[] = [];
    const w = await sbx.files.watchDir('watched', (e) => { events.push(e); }, { includeEntry: true, recursive: true });
    try {
      const find = (type: string, name: string) => events.find((e) => e.type === type && e.name === name);
      await sbx.files.write('watched/one.txt', 'hello', { metadata: { k: 'v' } });
      // Written, then its metadata set (a change of attributes): each entry as it was looked at then.
      await until('its events', () => !!(find('write', 'one.txt') && find('chmod', 'one.txt')));
      const written = find('write', 'one.txt')?.entry;
      assert.ok(written, 'a write carries its entry');
      assert.deepEqual([written.name, written.type, written.path, written.owner], ['one.txt', 'file', '/home/user/watched/one.txt', 'user']);
      assert.deepEqual(find('chmod', 'one.txt')?.entry?.metadata, { k: 'v' });
      await sbx.commands.run('mkdir watched/sub && rm watched/one.txt');
      await until('the next events', () => !!(find('create', 'sub') && find('remove', 'one.txt')));
      assert.deepEqual([find('create', 'sub')?.entry?.type, find('create', 'sub')?.entry?.path], ['dir', '/home/user/watched/sub']);
      assert.equal(find('remove', 'one.txt')?.entry, undefined);
    } finally {
      await w.stop();
    }
    // Polling watchers (CreateWatcher, the Python SDK's) take includeEntry too.
    const info = await fetch(`${t.server.url}/sandboxes/${sbx.sandboxId}`, { headers: { 'x-api-key': t.key } });
    const token = ((await info.json()) as { envdAccessToken: string }).envdAccessToken;
    const unary = async (method: string, body: object) => (await (await fetch(`${t.server.url}/filesystem.Filesystem/${method}`, {
      method: 'POST', headers: { 'content-type': 'application/json', 'e2b-sandbox-id': sbx.sandboxId, 'x-access-token': token }, body: JSON.stringify(body),
    })).json()) as Record<string, unknown>;
    const { watcherId } = await unary('CreateWatcher', { path: '/home/user/watched', includeEntry: true }) as { watcherId: string };
    await sbx.files.write('watched/polled.txt', 'p');
    const polled: { name: string; type: string; entry?: { path: string; type: string } }[] = [];
    await until('polled events', async () => {
      polled.push(...(await unary('GetWatcherEvents', { watcherId })).events as typeof polled);
      return polled.some((e) => e.name === 'polled.txt' && e.type === 'EVENT_TYPE_WRITE');
    });
    const write = polled.find((e) => e.name === 'polled.txt' && e.type === 'EVENT_TYPE_WRITE');
    assert.deepEqual([write?.entry?.path, write?.entry?.type], ['/home/user/watched/polled.txt', 'FILE_TYPE_FILE']);
    await unary('RemoveWatcher', { watcherId });
  });

  test('watchDir on a network mount (FUSE here) is refused unless allowNetworkMounts (envd 0.6.4)', async () => {
    await sbx.commands.run('mkdir -p /srv/l /srv/u /srv/w /srv/fuse && fuse-overlayfs -o lowerdir=/srv/l,upperdir=/srv/u,workdir=/srv/w,allow_other /srv/fuse && chmod 777 /srv/fuse', { user: 'root' });
    try {
      await assert.rejects(sbx.files.watchDir('/srv/fuse', () => undefined), (e: unknown) => e instanceof InvalidArgumentError && /network file system/.test(e.message));
      const events: FilesystemEvent[] = [];
      const w = await sbx.files.watchDir('/srv/fuse', (e) => { events.push(e); }, { allowNetworkMounts: true });
      try {
        await sbx.files.write('/srv/fuse/seen.txt', 'through the mount');
        await until('the event on the mount', () => events.some((e) => e.name === 'seen.txt'));
      } finally {
        await w.stop();
      }
    } finally {
      await sbx.commands.run('fusermount3 -u /srv/fuse', { user: 'root' });
    }
  });
});
