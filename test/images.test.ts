import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readFileSync, readdirSync, rmSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { ImageProgress } from '../packages/sdk/src/index.ts';
import { tar } from '../packages/sdk/src/tar.ts';
import { startTestServer, type TestServer } from './harness.ts';
import { APP_CONFIG, appLayer, baseLayer, importedLayers, skopeoCopy } from './image-fixtures.ts';
import { TestRegistry, TokenProxy, type Pushed } from './registry.ts';

describe('images: OCI pulls and imports become contexts', () => {
  let t: TestServer;
  let reg: TestRegistry;
  let proxy: TokenProxy;
  let app: Pushed;
  const dirs: string[] = [];
  const base = baseLayer();

  before(async () => {
    reg = await TestRegistry.start();
    proxy = await TokenProxy.start(reg.url);
    t = await startTestServer();
    app = await reg.push('test/app', '1', { layers: [base, appLayer()], config: APP_CONFIG });
  });
  after(async () => {
    await t?.close();
    await proxy?.close();
    await reg?.close();
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });

  /** A pull of REPO:1 through the proxy while one of its faults is on: a 400 saying `message`. */
  async function refusedThrough(fault: 'tamper' | 'grow', repo: string, message: RegExp): Promise<void> {
    proxy[fault] = true;
    try {
      const res = await t.http('POST', '/v1/images/pull', { body: { ref: `${proxy.host}/${repo}:1` } });
      assert.equal(res.status, 400, res.text);
      assert.match(res.json.error.message, message);
    } finally {
      proxy[fault] = false;
    }
  }

  test('a pull stores each layer with whiteouts and opaque directories honoured; contexts run with its Env, WorkingDir and User', async () => {
    const progress: ImageProgress[] = [];
    const img = await t.sb.images.pull(`${reg.host}/test/app:1`, { onProgress: (p) => progress.push(p) });
    assert.equal(img.ref, `${reg.host}/test/app:1`);
    assert.equal(img.digest, app.digest);
    assert.equal(img.layers, 2);
    assert.deepEqual(img.config, { env: { PATH: '/bin', GREETING: 'hi' }, cwd: '/app', user: 'app', cmd: ['/bin/sh'], exposedPorts: ['8080/tcp'] });
    assert.ok(progress.some((p) => /unpacked/.test(p.message)), JSON.stringify(progress));
    assert.deepEqual((await t.sb.images.list()).map((i) => i.ref), [img.ref]);

    const ctx = await t.sb.contexts.create({ name: 'app', image: `${reg.host}/test/app:1` });
    assert.equal(ctx.image, img.ref);
    assert.deepEqual(ctx.defaults, { env: { PATH: '/bin', GREETING: 'hi' }, cwd: '/app', user: 'app' });
    assert.deepEqual(ctx.config, { cmd: ['/bin/sh'], exposedPorts: ['8080/tcp'] });
    const c = t.sb.context('app');
    const r = await c.exec('id -u; id -g; id -G; pwd; echo $GREETING $HOME; cat hello.txt');
    assert.equal(r.stderr, '');
    assert.equal(r.stdout, '1000\n1000\n1000 50\n/app\nhi /home/app\nhello from the image\n');
    const root = await c.exec('id -u; pwd; echo $GREETING', { user: 'root', cwd: '/', env: { GREETING: 'override' } });
    assert.equal(root.stdout, '0\n/\noverride\n', 'a request overrides each default');
    const listing = await c.exec('ls /opt; test -e /etc/motd || echo no motd', { user: 'root' });
    assert.equal(listing.stdout, 'c\nno motd\n', 'the opaque /opt hides a and b; the whiteout hides /etc/motd');
    const wrote = await c.exec('echo mine > /home/app/f && stat -c %u /home/app/f');
    assert.deepEqual([wrote.stdout, wrote.committed], ['1000\n', true]);
    assert.equal((await c.files.stat('/home/app/f')).uid, 1000, 'the files API sees the owner a sandbox sees');
    assert.equal((await c.files.read('/app/hello.txt')).toString(), 'hello from the image\n');
    await assert.rejects(c.files.read('/opt/a'), /does not exist/);
  });

  test('defaults are set by PATCH, shown by GET, inherited by forks and refused when a request could not carry them', async () => {
    const c = t.sb.context('app');
    await c.setDefaults({ env: { PATH: '/bin', X: 'y' }, cwd: '/tmp', user: 'app:staff' });
    const fork = await c.fork('app-fork');
    assert.deepEqual((await fork.info()).defaults, { env: { PATH: '/bin', X: 'y' }, cwd: '/tmp', user: 'app:staff' });
    assert.equal((await fork.exec('id -u; id -g; pwd; echo $X')).stdout, '1000\n50\n/tmp\ny\n');
    for (const defaults of [{ cwd: 'relative' }, { user: 'a b' }, { env: { 'A-B': '1' } }]) {
      const res = await t.http('PATCH', '/v1/contexts/app', { body: { defaults } });
      assert.equal(res.status, 400, JSON.stringify(res.json));
    }
    assert.equal((await t.http('PATCH', '/v1/contexts/app', { body: { defaults: {}, extra: 1 } })).status, 400);
    const nobody = await c.exec('true', { user: 'nobody' }).catch((e: Error) => e);
    assert.match(String(nobody), /not in the context's \/etc\/passwd/);
    await c.setDefaults({});
    assert.equal((await c.info()).defaults, undefined);
    assert.equal((await c.exec('id -u; pwd')).stdout, '0\n/root\n', 'no defaults: root in /root');
  });

  test('a second image with the same base stores only its new layer; zstd layers and token auth work', async () => {
    const before = importedLayers(t.home).length;
    await reg.push('test/other', '2', { layers: [base, tar([{ path: 'other', data: 'zstd layer\n' }])], compression: 'zstd', config: { Env: ['PATH=/bin'] } });
    const progress: string[] = [];
    const img = await t.sb.images.pull(`${proxy.host}/test/other:2`, { onProgress: (p) => progress.push(p.message) });
    assert.ok(proxy.tokensIssued.includes('repository:test/other:pull'), `a token was asked for: ${proxy.tokensIssued.join(', ')}`);
    assert.equal(importedLayers(t.home).length, before + 1, 'the shared base is stored once');
    assert.ok(progress.some((m) => m.endsWith('stored already')), progress.join('\n'));
    await t.sb.contexts.create({ name: 'other', image: img.ref });
    assert.equal((await t.sb.context('other').exec('cat /other; busybox | head -1 | cut -c1-7')).stdout.split('\n')[0], 'zstd layer');
  });

  test('a blob redirected to storage on another host is fetched there without the token; a cut one is fetched again; one larger than its manifest says is refused', async () => {
    await reg.push('test/moved', '1', { layers: [base, tar([{ path: 'moved', data: 'from storage\n'.repeat(100) }])], config: { Env: ['PATH=/bin'] } });
    proxy.redirect = true;
    proxy.storageAuth = [];
    try {
      const img = await t.sb.images.pull(`${proxy.host}/test/moved:1`);
      assert.ok(proxy.storageAuth.length >= 1, 'the layer came from the storage host');
      assert.deepEqual(proxy.storageAuth.filter((a) => a !== undefined), [], 'the registry token stayed with the registry');
      await t.sb.contexts.create({ name: 'moved', image: img.ref });
      assert.equal((await t.sb.context('moved').exec('head -1 /moved')).stdout, 'from storage\n');
    } finally {
      proxy.redirect = false;
    }
    // A connection cut in the middle of a layer: tried again whole (curl itself retries nothing).
    await reg.push('test/interrupted', '1', { layers: [base, tar([{ path: 'interrupted', data: randomBytes(64 << 10) }])] });
    proxy.cut = 1;
    proxy.blobGets = 0;
    try {
      await t.sb.images.pull(`${proxy.host}/test/interrupted:1`);
      assert.equal(proxy.blobGets, 2, 'the cut layer was fetched again');
    } finally {
      proxy.cut = 0;
    }
    const layers = importedLayers(t.home);
    await reg.push('test/grown', '1', { layers: [tar([{ path: 'grown', data: randomBytes(8192) }])] });
    await refusedThrough('grow', 'test/grown', /larger than/);
    assert.deepEqual(importedLayers(t.home), layers, 'nothing of it was kept');
  });

  test('an index picks linux/amd64; an image for another platform only is refused, saying what it has', async () => {
    const arm = await reg.push('test/multi', 'arm-only', { layers: [base], architecture: 'arm64' });
    const amd = await reg.push('test/multi', 'amd', { layers: [base, appLayer()], config: APP_CONFIG });
    await reg.pushIndex('test/multi', 'both', [{ ...arm, os: 'linux', architecture: 'arm64' }, { ...amd, os: 'linux', architecture: 'amd64' }]);
    await reg.pushIndex('test/multi', 'arm', [{ ...arm, os: 'linux', architecture: 'arm64' }]);
    const both = await t.sb.images.pull(`${reg.host}/test/multi:both`);
    assert.equal(both.digest, amd.digest, 'the linux/amd64 manifest of the index');
    for (const tag of ['arm', 'arm-only']) {
      const res = await t.http('POST', '/v1/images/pull', { body: { ref: `${reg.host}/test/multi:${tag}` } });
      assert.equal(res.status, 400, res.text);
      assert.match(res.json.error.message, /linux\/arm64/);
    }
  });

  test('bad references, unknown registries and missing tags are clear errors that keep nothing', async () => {
    const layers = importedLayers(t.home).length;
    const cases: [string, number, RegExp][] = [
      ['Not A Ref!', 400, /not an image reference/],
      ['no-such-registry.invalid/x:1', 400, /unknown registry/],
      [`${reg.host}/test/app:missing`, 404, /does not exist/],
      [`${reg.host}/test/nothing:1`, 404, /does not exist/],
      ['debian', 400, /built-in/],
    ];
    for (const [ref, status, message] of cases) {
      const res = await t.http('POST', '/v1/images/pull', { body: { ref } });
      assert.equal(res.status, status, `${ref}: ${res.text}`);
      assert.match(res.json.error.message, message);
    }
    const notPulled = await t.http('POST', '/v1/contexts', { body: { name: 'np', image: `${reg.host}/test/never:1` } });
    assert.equal(notPulled.status, 404);
    assert.match(notPulled.json.error.hint, /pull it first/);
    assert.equal(importedLayers(t.home).length, layers);
  });

  test('a layer whose digest or diff_id does not match is refused and nothing of it is kept', async () => {
    const layers = importedLayers(t.home);
    const fresh = tar([{ path: 'tampered', data: Buffer.alloc(4096, 7) }]);
    await reg.push('test/tamper', '1', { layers: [fresh], compression: 'none' });
    await refusedThrough('tamper', 'test/tamper', /digest mismatch/);
    await reg.push('test/lie', '1', { layers: [tar([{ path: 'lie', data: 'x' }])], diffIds: [`sha256:${'0'.repeat(64)}`] });
    const lie = await t.http('POST', '/v1/images/pull', { body: { ref: `${reg.host}/test/lie:1` } });
    assert.equal(lie.status, 400, lie.text);
    assert.match(lie.json.error.message, /diff_id mismatch/);
    // A gzip stream cut short and one with its deflate data spoiled, each under its own (matching) digest.
    const big = tar([{ path: 'big', data: randomBytes(1 << 20) }]);
    const spoiled: [string, (b: Buffer) => Buffer][] = [
      ['cut', (b) => b.subarray(0, b.length >> 1)],
      ['spoiled', (b) => { const c = Buffer.from(b); c.fill(0xff, 20, 4096); return c; }],
    ];
    for (const [name, mangle] of spoiled) {
      const [sent] = (await reg.push(`test/${name}`, '1', { layers: [big], mangle })).layers;
      const bad = await t.http('POST', '/v1/images/pull', { body: { ref: `${reg.host}/test/${name}:1` } });
      assert.equal(bad.status, 400, bad.text);
      assert.match(bad.json.error.message, /cannot be decompressed/, name);
      // Which layer, and how much of it had arrived: a cut stream is read to its end before it
      // fails; a spoiled one fails at its start, while more of it may still be on its way.
      const { receivedBytes, ...which } = bad.json.error.details as { receivedBytes: number };
      assert.deepEqual(which, { layer: sent.digest, size: sent.size }, name);
      if (name === 'cut') assert.equal(receivedBytes, sent.size);
      else assert.ok(receivedBytes > 0 && receivedBytes <= sent.size, `${name}: ${receivedBytes} of ${sent.size} bytes`);
    }
    assert.deepEqual(importedLayers(t.home), layers, 'no layer tree was kept');
    assert.equal((await t.sb.images.list()).some((i) => /tamper|lie|cut|spoiled/.test(i.ref)), false);
    assert.deepEqual(readdirSync(path.join(t.home, 'store', 'scratch')).filter((n) => !n.startsWith('s_')), [], 'no scratch left but the pool');
  });

  test('absolute names land below the root, device nodes are dropped, members with .. refuse the layer', async () => {
    await reg.push('test/odd', '1', {
      layers: [base, tar([{ path: '/abs/file', data: 'abs' }, { path: 'dev/null-copy', type: 'char' }, { path: 'fifo', type: 'fifo' }, { path: 'kept', data: 'k' }])],
    });
    const progress: string[] = [];
    const img = await t.sb.images.pull(`${reg.host}/test/odd:1`, { onProgress: (p) => progress.push(p.message) });
    assert.ok(progress.some((m) => /dropped 2 device nodes or FIFOs/.test(m)), progress.join('\n'));
    await t.sb.contexts.create({ name: 'odd', image: img.ref });
    assert.equal((await t.sb.context('odd').exec('cat /abs/file /kept; ls /dev/null-copy /fifo 2>&1 | wc -l')).stdout, 'absk2\n');
    const layers = importedLayers(t.home);
    await reg.push('test/dotdot', '1', { layers: [tar([{ path: 'a/../../escape', data: 'x' }])] });
    const res = await t.http('POST', '/v1/images/pull', { body: { ref: `${reg.host}/test/dotdot:1` } });
    assert.equal(res.status, 400, res.text);
    assert.match(res.json.error.message, /leaves its root/);
    assert.deepEqual(importedLayers(t.home), layers);
  });

  test('docker save and OCI layout archives import; an archive without a name needs ref', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'shellbase-archives-'));
    dirs.push(dir);
    skopeoCopy(`docker://${reg.host}/test/app:1`, `docker-archive:${dir}/saved.tar:test/saved:7`);
    const saved = await t.sb.images.import(readFileSync(`${dir}/saved.tar`));
    assert.deepEqual(saved.map((i) => i.ref), ['docker.io/test/saved:7']);
    assert.deepEqual(saved[0].config.env, { PATH: '/bin', GREETING: 'hi' });
    await t.sb.contexts.create({ name: 'saved', image: 'test/saved:7' });
    assert.equal((await t.sb.context('saved').exec('cat hello.txt; id -un')).stdout, 'hello from the image\napp\n');

    skopeoCopy(`docker://${reg.host}/test/other:2`, `oci-archive:${dir}/layout.tar:2`);
    const post = (body: Buffer) => fetch(`${t.server.url}/v1/images/import`, { method: 'POST', body, headers: { authorization: `Bearer ${t.key}`, 'content-type': 'application/x-tar' } });
    const unnamed = await post(readFileSync(`${dir}/layout.tar`));
    assert.equal(unnamed.status, 400);
    assert.match(((await unnamed.json()) as { error: { message: string } }).error.message, /names no image/);
    const layout = await t.sb.images.import(readFileSync(`${dir}/layout.tar`), { ref: 'local/layout:2' });
    assert.equal(layout[0].ref, 'docker.io/local/layout:2');
    const garbage = await post(Buffer.from('not a tar archive at all'.repeat(40)));
    assert.equal(garbage.status, 400);
    assert.match(((await garbage.json()) as { error: { message: string } }).error.message, /not a tar archive/);
    assert.deepEqual(readdirSync(t.home).includes('tmp') ? readdirSync(path.join(t.home, 'tmp')) : [], [], 'imports leave no spool behind');
  });

  test('delete forgets a reference; its contexts keep working', async () => {
    await t.sb.images.delete(`${reg.host}/test/odd:1`);
    assert.equal((await t.sb.images.list()).some((i) => i.ref.endsWith('test/odd:1')), false);
    assert.equal((await t.sb.context('odd').exec('cat /kept')).stdout, 'k');
    assert.equal((await t.http('DELETE', `/v1/images/${reg.host}/test/odd:1`)).status, 404);
    const gc = await t.sb.gc();
    assert.equal(gc.complete, true);
    assert.equal((await t.sb.context('odd').exec('cat /kept')).stdout, 'k', 'collection keeps what a context stands on');
  });

  test('a machine of an image without systemd is refused, saying what it lacks', async () => {
    const res = await t.http('POST', '/v1/machines', { body: { context: 'app' } });
    assert.equal(res.status, 412, res.text);
    assert.match(res.json.error.message, /no \/sbin\/init/);
  });
});
