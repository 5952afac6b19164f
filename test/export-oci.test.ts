import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import type { Shellbase } from '@shellbase/sdk';
import { closedPort, startTestServer, type TestServer } from './harness.ts';
import { TestRegistry } from './registry.ts';

const CLI = path.resolve('packages/cli/dist/main.js');
const run = promisify(execFile);

/** A context exported as an OCI image (a layout, a push), read back by skopeo and `image pull`. */
describe('OCI export', () => {
  let t: TestServer;
  let reg: TestRegistry;
  let env: NodeJS.ProcessEnv;
  const dir = mkdtempSync(path.join(tmpdir(), 'shellbase-oci-'));
  let layoutDigest = '';

  before(async () => {
    reg = await TestRegistry.start();
    t = await startTestServer();
    env = { ...process.env, SHELLBASE_URL: t.server.url, SHELLBASE_API_KEY: t.key };
    const src = t.sb.context('src');
    await src.exec('mkdir -p /root/opq/sub && echo old > /root/opq/a && echo x > /root/opq/sub/x && echo gone > /root/gone.txt && echo keep > /root/keep.txt');
    // A whiteout of this layer's file, of the base image's file, and an opaque directory.
    await src.exec('rm /root/gone.txt /etc/issue && rm -rf /root/opq && mkdir /root/opq && echo new > /root/opq/b && chmod 640 /root/keep.txt');
    await t.http('PATCH', '/v1/contexts/src', { body: { defaults: { env: { GREETING: 'hi' }, cwd: '/root' } } });
  });
  after(async () => {
    await t?.close();
    await reg?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  /** The files the test made and some of debian's: names, types, modes, owners, sizes (not directories': file systems differ), link targets, contents. */
  const filesHash = async (sb: Shellbase, ctx: string) => (await sb.context(ctx).exec(
    "cd / && { { find root etc/apt usr/bin -xdev -type d -printf '%p d %m %u %g\\n'; find root etc/apt usr/bin -xdev ! -type d -printf '%p %y %m %u %g %s %l\\n'; } | sort;"
    + ' find root etc/apt -xdev -type f -print0 | sort -z | xargs -0 sha256sum; }',
    { commit: 'never' })).stdout;

  /** What a context pulled back must show: the deletions held, the opaque directory hides the old entries. */
  async function sameFiles(ctx: string): Promise<void> {
    assert.deepEqual((await filesHash(t.sb, ctx)).split('\n'), (await filesHash(t.sb, 'src')).split('\n'));
    const r = await t.sb.context(ctx).exec('ls -A /root/opq; test -e /root/gone.txt && echo gone-is-there; test -e /etc/issue && echo issue-is-there; cat /root/keep.txt; echo "$GREETING $PWD"', { commit: 'never' });
    assert.equal(r.stdout, 'b\nkeep\nhi /root\n');
  }

  test('the CLI writes an image layout that skopeo copies into a registry and `image pull` reads back with the same files', async () => {
    const layout = path.join(dir, 'layout');
    await run(process.execPath, [CLI, 'export', 'src', '--oci', layout, '--tag', 't1'], { env });
    assert.deepEqual(JSON.parse(readFileSync(path.join(layout, 'oci-layout'), 'utf8')), { imageLayoutVersion: '1.0.0' });
    const index = JSON.parse(readFileSync(path.join(layout, 'index.json'), 'utf8'));
    assert.equal(index.manifests.length, 1);
    assert.equal(index.manifests[0].annotations['org.opencontainers.image.ref.name'], 't1');
    layoutDigest = index.manifests[0].digest;
    const manifest = JSON.parse(readFileSync(path.join(layout, 'blobs/sha256', layoutDigest.slice(7)), 'utf8'));
    assert.equal(manifest.layers.length, 3, 'debian and the two layers of the context');
    assert.ok(manifest.layers.every((l: { mediaType: string }) => l.mediaType === 'application/vnd.oci.image.layer.v1.tar+gzip'));
    const config = JSON.parse(readFileSync(path.join(layout, 'blobs/sha256', manifest.config.digest.slice(7)), 'utf8'));
    assert.equal(config.architecture, 'amd64');
    assert.equal(config.os, 'linux');
    assert.equal(config.config.WorkingDir, '/root');
    assert.ok(config.config.Env.includes('GREETING=hi'), config.config.Env);
    assert.equal(config.rootfs.diff_ids.length, 3);
    // The top layer in OCI form: a whiteout file for each deletion, the opaque marker after its directory.
    const top = execFileSync('tar', ['-tzf', path.join(layout, 'blobs/sha256', manifest.layers[2].digest.slice(7))], { encoding: 'utf8' }).split('\n');
    assert.ok(top.includes('./root/.wh.gone.txt'), top.join(' '));
    assert.ok(top.includes('./etc/.wh.issue'), top.join(' '));
    assert.ok(top.indexOf('./root/opq/.wh..wh..opq') === top.indexOf('./root/opq/') + 1, top.join(' '));
    // Owners are the sandbox's (root), not the host's shifted ids.
    const owners = execFileSync('tar', ['--numeric-owner', '-tvzf', path.join(layout, 'blobs/sha256', manifest.layers[2].digest.slice(7))], { encoding: 'utf8' });
    assert.match(owners, /^\S+ 0\/0 /m);
    assert.doesNotMatch(owners, / 1\d{5}\/\d+ /);

    const inspected = JSON.parse(execFileSync('skopeo', ['inspect', `oci:${layout}:t1`], { encoding: 'utf8' }));
    assert.equal(inspected.Digest, layoutDigest);
    execFileSync('skopeo', ['copy', '--quiet', '--insecure-policy', '--dest-tls-verify=false', `oci:${layout}:t1`, `docker://${reg.host}/oci/layout:t1`], { stdio: ['ignore', 'ignore', 'pipe'] });
    const img = await t.sb.images.pull(`${reg.host}/oci/layout:t1`);
    assert.equal(img.digest, layoutDigest);
    await t.sb.contexts.create({ name: 'from-layout', image: `${reg.host}/oci/layout:t1` });
    await sameFiles('from-layout');
  });

  test('a push to a registry is the same image (the same digest: exports are deterministic), pulled back with the same files', async () => {
    assert.ok(layoutDigest, 'the layout test ran first');
    const { stdout } = await run(process.execPath, [CLI, 'export', 'src', '--oci', `${reg.host}/oci/pushed:1`], { env });
    const pushed = await t.sb.contexts.push('src', `${reg.host}/oci/pushed:2`);
    assert.equal(stdout.trim(), `${reg.host}/oci/pushed:1@${layoutDigest}`);
    assert.deepEqual(pushed, { ref: `${reg.host}/oci/pushed:2`, digest: layoutDigest, layers: 3 });
    assert.equal((await t.sb.images.pull(`${reg.host}/oci/pushed:2`)).digest, layoutDigest);
    await t.sb.contexts.create({ name: 'from-push', image: `${reg.host}/oci/pushed:2` });
    await sameFiles('from-push');
  });

  test('bad input: an unknown version or context, a bad reference, a registry that refuses: typed errors, nothing written', async () => {
    const missing = path.join(dir, 'missing');
    await assert.rejects(run(process.execPath, [CLI, 'export', 'src', '--oci', missing, '--version', 'v_nope'], { env }), /not_found|does not exist/);
    assert.equal(existsSync(missing), false);
    let r = await t.http('GET', '/v1/contexts/nope/export/oci');
    assert.equal(r.status, 404, r.text);
    r = await t.http('POST', '/v1/contexts/src/push', { body: { ref: 'Not A Ref' } });
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json.error.code, 'invalid_argument');
    r = await t.http('POST', '/v1/contexts/src/push', { body: { ref: `${reg.host}/x/y@sha256:${'0'.repeat(64)}` } });
    assert.equal(r.status, 400, r.text);
    r = await t.http('POST', '/v1/contexts/src/push', { body: { ref: `${reg.host}/x/y:1`, version: 'v_nope' } });
    assert.equal(r.status, 404, r.text);

    // A registry that wants credentials (basic) and takes none: forbidden, before any layer is made.
    const seen: string[] = [];
    const port = await closedPort();
    const refusing: Server = createServer((req, res) => {
      seen.push(`${req.method} ${req.url}`);
      res.writeHead(401, { 'www-authenticate': 'Basic realm="test"' }).end();
    });
    await new Promise<void>((resolve) => refusing.listen(port, '127.0.0.1', resolve));
    try {
      r = await t.http('POST', '/v1/contexts/src/push', { body: { ref: `127.0.0.1:${port}/x/y:1` } });
      assert.equal(r.status, 403, r.text);
      assert.equal(r.json.error.code, 'forbidden');
      r = await t.http('POST', '/v1/contexts/src/push', { body: { ref: `127.0.0.1:${port}/x/y:1`, credentials: { username: 'u', password: 'wrong' } } });
      assert.equal(r.status, 403, r.text);
      assert.ok(seen.every((s) => s.startsWith('POST /v2/x/y/blobs/uploads/')), seen.join(', '));
    } finally {
      refusing.closeAllConnections();
      await new Promise((resolve) => refusing.close(resolve));
    }
    // A registry that is not there: unavailable.
    r = await t.http('POST', '/v1/contexts/src/push', { body: { ref: `127.0.0.1:${await closedPort()}/x/y:1` } });
    assert.equal(r.status, 503, r.text);
    assert.deepEqual(await t.sb.images.list().then((l) => l.map((i) => i.ref).sort()), [`${reg.host}/oci/layout:t1`, `${reg.host}/oci/pushed:2`]);
  });
});
