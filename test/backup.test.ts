import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, test } from 'node:test';
import pino from 'pino';
import { Shellbase } from '@shellbase/sdk';
import { loadConfig, restoreServer, startServer, type BackupManifest } from '@shellbase/server';
import { exited, spawnServer, startTestServer, stopServer, type TestServer } from './harness.ts';
import { startS3, type TestS3 } from './s3.ts';

const run = promisify(execFile);
const CLI = path.resolve('packages/cli/dist/main.js');

/** The CLI over `home` (its admin key, its server's URL when one is given). */
async function cli(args: string[], env: Record<string, string> = {}): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const r = await run(process.execPath, [CLI, ...args], { env: { ...process.env, ...env } });
    return { code: 0, stdout: r.stdout, stderr: r.stderr };
  } catch (e) {
    const x = e as { code: number; stdout: string; stderr: string };
    return { code: x.code, stdout: x.stdout, stderr: x.stderr };
  }
}

/** A digest of a version's files (names, types, modes, sizes, links, contents). */
const filesHash = async (sb: Shellbase, ctx: string, version?: string) => (await sb.context(ctx).exec(
  "cd / && { find root etc -xdev -printf '%p %y %m %s %l\\n' | sort; find root etc -xdev -type f -print0 | sort -z | xargs -0 sha256sum; } | sha256sum",
  { commit: 'never', ...(version ? { version } : {}) })).stdout;

const manifestOf = (dir: string, id: string) => JSON.parse(readFileSync(path.join(dir, 'docs', 'backups', id, 'manifest.json'), 'utf8')) as BackupManifest;
const blobFile = (dir: string, digest: string) => path.join(dir, 'sha256', digest.slice(7, 9), digest.slice(7));

/** The layers in a home's store (its btrfs image mounted read-only for a look). */
function storedLayers(home: string): string[] {
  const at = mkdtempSync(path.join(tmpdir(), 'shellbase-look-'));
  execFileSync('mount', ['-o', 'loop,ro', path.join(home, 'store.btrfs'), at]);
  try {
    return readdirSync(path.join(at, 'layers')).filter((n) => !n.endsWith('.json'));
  } finally {
    execFileSync('umount', [at]);
    rmSync(at, { recursive: true, force: true });
  }
}

/** An empty home with the test servers' settings, restored into by `restoreServer`, then served. */
function freshHome() {
  const home = mkdtempSync(path.join(tmpdir(), 'shellbase-restore-'));
  return { home, config: loadConfig({ home, port: 0, gatewayPort: 0, host: '127.0.0.1', storeSizeGb: 16 }) };
}

describe('server backup and restore', () => {
  let a: TestServer;
  const dir = mkdtempSync(path.join(tmpdir(), 'shellbase-backups-'));
  const target = path.join(dir, 'target');
  const homes: string[] = [];
  const before1: Record<string, string> = {};
  let tenantKey = '';
  let first = '';

  before(async () => {
    a = await startTestServer();
    const src = a.sb.context('src');
    before1.v1 = (await src.files.write('/root/a.txt', 'one\n')).version;
    await src.fork('side');
    await a.sb.context('side').files.write('/root/side.txt', 'side\n');
    before1.v2 = (await src.exec('echo two > /root/b.txt && mkdir -p /root/d && ln -s ../a.txt /root/d/link && chmod 600 /root/b.txt')).version;
    before1.merge = (await a.http('POST', '/v1/contexts/src/merge', { body: { from: 'side' } })).json.version;
    tenantKey = (await a.sb.tenants.create('acme')).apiKey;
    const acme = new Shellbase({ url: a.server.url, apiKey: tenantKey });
    before1.acme = (await acme.context('work').exec('head -c 300000 /dev/urandom > /root/blob && echo acme > /root/who')).version;
  });
  after(async () => {
    await a?.close();
    for (const h of homes) rmSync(h, { recursive: true, force: true });
    rmSync(dir, { recursive: true, force: true });
  });

  test('a backup taken during concurrent writes restores on a fresh home: every version, the same files, the same keys', async () => {
    // Writers commit on two contexts for as long as the backup runs.
    let writing = true;
    const acked: { ctx: string; version: string; n: number; sent: number; at: number }[] = [];
    const writer = async (ctx: string) => {
      for (let n = 0; writing; n++) {
        const sent = Date.now();
        const { version } = await a.sb.context(ctx).files.write(`/root/w${n}.txt`, `${ctx} ${n}\n`);
        acked.push({ ctx, version, n, sent, at: Date.now() });
      }
    };
    const writers = [writer('w1'), writer('w2')];
    // Both contexts exist, with acknowledged writes, before the backup starts (however slow the host).
    while (!['w1', 'w2'].every((c) => acked.some((w) => w.ctx === c))) await new Promise((r) => setTimeout(r, 20));
    const ackedBefore = acked.length;
    const phases = new Set<string>();
    const started = Date.now();
    const r = await a.sb.backup({ to: target, onProgress: (p) => phases.add(p.phase) });
    const ended = Date.now();
    writing = false;
    await Promise.all(writers);
    first = r.id;
    assert.deepEqual([...phases].sort(), ['layers', 'metadata']);
    assert.equal(r.copied, r.layers, 'the first backup copies every layer');
    assert.ok(acked.some((w) => w.sent < ended && w.at > started), 'writes were in flight while the backup ran');

    const m = manifestOf(target, r.id);
    const { home, config } = freshHome();
    homes.push(home);
    const restored = await cli(['restore', '--from', target], { SHELLBASE_HOME: home, SHELLBASE_STORE_SIZE_GB: '16' });
    assert.equal(restored.code, 0, restored.stderr);
    assert.equal(restored.stdout.trim(), r.id);
    const b = await startServer(config, pino({ level: 'silent' }));
    try {
      assert.equal(readFileSync(path.join(home, 'admin.key'), 'utf8'), readFileSync(a.server.adminKeyFile, 'utf8'), 'the admin key file came back');
      const sb = new Shellbase({ url: b.url, apiKey: readFileSync(b.adminKeyFile, 'utf8').trim() });
      // Every write acknowledged before the backup started is in it, with every version the manifest counts.
      for (const w of acked.slice(0, ackedBefore)) {
        assert.equal((await sb.context(w.ctx).files.read(`/root/w${w.n}.txt`, { version: w.version })).toString(), `${w.ctx} ${w.n}\n`);
      }
      const heads = await Promise.all(['src', 'side', 'w1', 'w2'].map(async (c) => [c, (await sb.contexts.get(c)).head] as const));
      for (const [c, head] of heads) {
        assert.ok(acked.some((w) => w.version === head) || c === 'src' || c === 'side', `${c}'s head ${head} is a version that was acknowledged`);
        assert.equal(await filesHash(sb, c), await filesHash(a.sb, c, head), `${c}'s head has the same files`);
      }
      for (const v of [before1.v1, before1.v2, before1.merge]) assert.equal(await filesHash(sb, 'src', v), await filesHash(a.sb, 'src', v), `version ${v}`);
      assert.equal(m.totals.contexts, 5, 'src, side, w1, w2 and the tenant\'s work');
      // A tenant's key works, and sees only its own context with its files.
      const acme = new Shellbase({ url: b.url, apiKey: tenantKey });
      assert.deepEqual((await acme.contexts.list()).map((c) => c.name), ['work']);
      assert.equal(await filesHash(acme, 'work'), await filesHash(new Shellbase({ url: a.server.url, apiKey: tenantKey }), 'work'));
      // The restored server goes on committing.
      await sb.context('src').files.write('/root/after.txt', 'after\n');
    } finally {
      await b.close();
    }
  });

  test('a second backup copies only what the target lacks; ls lists both; verify reads every part', async () => {
    // A quiet backup first: what the writers committed after the first one's point is copied now.
    const quiet = await a.sb.backup({ to: target });
    await a.sb.context('src').files.write('/root/new.txt', 'new\n');
    const r = await a.sb.backup({ to: target });
    // The new write's layer, and those squashes made since (background work): nothing else.
    const known = new Set(manifestOf(target, quiet.id).layers.map((l) => l.id));
    const fresh = manifestOf(target, r.id).layers.filter((l) => !known.has(l.id));
    assert.equal(r.copied, fresh.length);
    assert.ok(r.copied >= 1 && r.copied <= 3, `the new layer and at most a squash per written context (${r.copied} of ${r.layers})`);
    const ls = await cli(['backup', 'ls', target]);
    assert.equal(ls.code, 0, ls.stderr);
    assert.match(ls.stdout, new RegExp(`${first}\\s+complete`));
    assert.match(ls.stdout, new RegExp(`${r.id}\\s+complete`));
    const v = await cli(['backup', 'verify', target]);
    assert.equal(v.code, 0, v.stderr);
    assert.match(v.stdout, /every part is whole/);
  });

  test('a tampered or missing blob: verify names it, restore refuses and leaves the home empty', async () => {
    const t2 = path.join(dir, 'tampered');
    const r = await a.sb.backup({ to: t2 });
    const m = manifestOf(t2, r.id);
    const victim = m.layers.find((l) => l.size > 1000)!;
    const file = blobFile(t2, victim.digest);
    const bytes = readFileSync(file);
    bytes[bytes.length >> 1] ^= 0xff;
    writeFileSync(file, bytes);
    const v = await cli(['backup', 'verify', t2]);
    assert.equal(v.code, 1);
    assert.match(v.stderr, new RegExp(`layer ${victim.id} is damaged`));
    const { home, config } = freshHome();
    homes.push(home);
    await assert.rejects(restoreServer(config, t2, {}), (e: Error) => e.message.includes(`layer ${victim.id}`) && /is damaged/.test(e.message));
    assert.equal(existsSync(path.join(home, 'meta.db')), false, 'no metadata');
    assert.deepEqual(storedLayers(home), [], 'no layer stays');
    rmSync(file);
    await assert.rejects(restoreServer(config, t2, {}), (e: Error) => e.message.includes(`layer ${victim.id} is missing`));
    assert.equal(existsSync(path.join(home, 'meta.db')), false);
  });

  test('restore refuses a home that is not empty, an incomplete backup, and a newer format', async () => {
    await assert.rejects(restoreServer(a.config, target, {}), /not empty|another shellbase server/);
    const { home, config } = freshHome();
    homes.push(home);
    const t3 = path.join(dir, 'odd');
    const r = await a.sb.backup({ to: t3 });
    const m = manifestOf(t3, r.id);
    writeFileSync(path.join(t3, 'docs', 'backups', r.id, 'manifest.json'), JSON.stringify({ ...m, format: 99 }));
    await assert.rejects(restoreServer(config, t3, {}), /format 99/);
    rmSync(path.join(t3, 'docs', 'backups', r.id, 'manifest.json'));
    await assert.rejects(restoreServer(config, t3, { id: r.id }), /incomplete/);
    const ls = await cli(['backup', 'ls', t3]);
    assert.match(ls.stdout, new RegExp(`${r.id}\\s+INCOMPLETE`));
    assert.equal(existsSync(path.join(home, 'meta.db')), false);
    // Only the admin key backs up.
    const tenant = new Shellbase({ url: a.server.url, apiKey: tenantKey });
    await assert.rejects(tenant.backup({ to: t3 }), (e: { code: string }) => e.code === 'forbidden');
    await assert.rejects(a.sb.backup({ to: 'relative/dir' }), (e: { code: string }) => e.code === 'invalid_argument');
  });

  test('retention keeps the newest N complete backups and the blobs they name', async () => {
    const t4 = path.join(dir, 'kept');
    await a.sb.backup({ to: t4 });
    await a.sb.context('src').files.write('/root/gone-soon.txt', 'x\n');
    await a.sb.backup({ to: t4 });
    const blobs = () => (readdirSync(path.join(t4, 'sha256'), { recursive: true }) as string[]).filter((n) => /[0-9a-f]{64}$/.test(n)).length;
    const blobsBefore = blobs();
    const r = await a.sb.backup({ to: t4, keep: 1 });
    assert.equal(r.removed?.backups.length, 2);
    const ls = await cli(['backup', 'ls', t4, '--json']);
    assert.deepEqual((JSON.parse(ls.stdout) as { id: string }[]).map((b) => b.id), [r.id]);
    assert.ok(blobs() < blobsBefore, 'the older metadata blobs went');
    assert.equal((await cli(['backup', 'verify', t4])).code, 0, 'what is kept is whole');
  });
});

describe('a backup cut short, and one in S3', () => {
  let s3: TestS3;
  const dir = mkdtempSync(path.join(tmpdir(), 'shellbase-backups-'));
  // Passable: the home below it is where sandboxes' trees are.
  chmodSync(dir, 0o711);
  before(async () => { s3 = await startS3(); });
  after(async () => {
    await s3?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  test('kill -9 of the server mid-backup: that backup is incomplete and never restored from; the next completes', async () => {
    const home = path.join(dir, 'home');
    const target = path.join(dir, 'target');
    let { child, sb } = await spawnServer(home);
    try {
      for (let i = 0; i < 24; i++) await sb.context('big').exec(`head -c 4000000 /dev/urandom > /root/r${i}`);
      // Killed once the first layer is stored: 23 layers of 4 MB (incompressible) were still to go.
      const cut = sb.backup({ to: target, onProgress: (p) => { if (p.phase === 'layers' && p.done >= 1) child.kill('SIGKILL'); } });
      await assert.rejects(cut);
      await exited(child);
      const ls1 = await cli(['backup', 'ls', target, '--json']);
      const broken = (JSON.parse(ls1.stdout) as { id: string; complete: boolean }[]);
      assert.equal(broken.length, 1);
      assert.equal(broken[0].complete, false);
      ({ child, sb } = await spawnServer(home));
      const r = await sb.backup({ to: target });
      assert.ok(r.copied < r.layers, 'layers the cut backup stored are not copied again');
      const fresh = path.join(dir, 'fresh');
      const config = loadConfig({ home: fresh, storeSizeGb: 16 });
      await assert.rejects(restoreServer(config, target, { id: broken[0].id }), /incomplete/);
      assert.equal((await restoreServer(config, target, {})).id, r.id, 'the newest complete backup');
      rmSync(fresh, { recursive: true, force: true });
    } finally {
      await stopServer(child);
    }
  });

  test('a backup to an S3 prefix restores the same files', async () => {
    Object.assign(process.env, { AWS_ACCESS_KEY_ID: 'test', AWS_SECRET_ACCESS_KEY: 'test', AWS_REGION: 'us-east-1' });
    const t = await startTestServer();
    try {
      const v = (await t.sb.context('s3ctx').exec('echo in s3 > /root/f && head -c 100000 /dev/urandom > /root/g')).version;
      const to = `s3://${s3.bucket}/backups/one`;
      const r = await t.sb.backup({ to, s3Endpoint: s3.endpoint });
      assert.ok((await s3.keys('backups/one/docs/backups/')).some((k) => k.endsWith(`${r.id}/manifest.json`)));
      const { home, config } = freshHome();
      try {
        await restoreServer(config, to, { s3Endpoint: s3.endpoint });
        const b = await startServer(config, pino({ level: 'silent' }));
        try {
          const sb = new Shellbase({ url: b.url, apiKey: readFileSync(b.adminKeyFile, 'utf8').trim() });
          assert.equal((await sb.contexts.get('s3ctx')).head, v);
          assert.equal(await filesHash(sb, 's3ctx'), await filesHash(t.sb, 's3ctx'));
        } finally {
          await b.close();
        }
      } finally {
        rmSync(home, { recursive: true, force: true });
      }
    } finally {
      await t.close();
    }
  });
});
