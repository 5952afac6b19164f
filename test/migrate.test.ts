import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { chmodSync, copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, test } from 'node:test';
import { Shellbase } from '@shellbase/sdk';
import { PREFIX, startCluster, type TestCluster } from './cluster-harness.ts';
import { spawnServer, stopServer } from './harness.ts';

const run = promisify(execFile);
const CLI = path.resolve('packages/cli/dist/main.js');

/** A digest of a version's files (names, types, modes, sizes, links, contents). */
const filesHash = async (sb: Shellbase, ctx: string) => (await sb.context(ctx).exec(
  "cd / && { find root etc -xdev -printf '%p %y %m %s %l\\n' | sort; find root etc -xdev -type f -print0 | sort -z | xargs -0 sha256sum; } | sha256sum",
  { commit: 'never' })).stdout;

describe('migrating an embedded server into a cluster', { timeout: 600_000 }, () => {
  let cluster: TestCluster;
  const dir = mkdtempSync(path.join(tmpdir(), 'shellbase-migrate-'));
  chmodSync(dir, 0o711);
  const home = path.join(dir, 'embedded');
  const source: { heads: Record<string, string>; hashes: Record<string, string>; versions: number; tenantKey: string; adminKey: string } = {
    heads: {}, hashes: {}, versions: 0, tenantKey: '', adminKey: '',
  };

  const migrate = (h: string, metadata = cluster.database) => run(process.execPath, [CLI, 'migrate', '--metadata', metadata,
    '--blobs', `s3://${cluster.s3.bucket}/${PREFIX}`, '--s3-endpoint', cluster.s3.endpoint], {
    env: { ...process.env, SHELLBASE_HOME: h, SHELLBASE_STORE_SIZE_GB: '16', AWS_ACCESS_KEY_ID: 'test', AWS_SECRET_ACCESS_KEY: 'test', AWS_REGION: 'us-east-1' },
  }).then((r) => ({ code: 0, ...r }), (e: { code: number; stdout: string; stderr: string }) => ({ code: e.code, stdout: e.stdout, stderr: e.stderr }));

  before(async () => {
    cluster = await startCluster();
    // The embedded server: 1,000 versions over several contexts of two tenants, a fork and a merge.
    const { child, sb } = await spawnServer(home);
    try {
      const { apiKey } = await sb.tenants.create('acme');
      source.tenantKey = apiKey;
      const acme = new Shellbase({ url: sb.url, apiKey });
      await sb.context('main').exec('mkdir -p /root/d && echo base > /root/d/f && ln -s d/f /root/link');
      await sb.context('main').fork('side');
      await Promise.all(Array.from({ length: 4 }, async (_, w) => {
        for (let i = w; i < 1000; i += 4) {
          const owner = i % 5 === 0 ? acme : sb;
          await owner.context(`c${i % 7}`).files.write(`/root/f${i}`, `${i}\n`);
        }
      }));
      await sb.context('side').files.write('/root/side', 'side\n');
      await sb.context('main').merge('side');
      for (const [who, client] of [['admin', sb], ['acme', acme]] as const) {
        for (const c of await client.contexts.list()) {
          source.heads[`${who}/${c.name}`] = c.head;
          source.hashes[`${who}/${c.name}`] = await filesHash(client, c.name);
        }
      }
      source.adminKey = readFileSync(path.join(home, 'admin.key'), 'utf8').trim();
    } finally {
      await stopServer(child);
    }
  });
  after(async () => {
    await cluster?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  test('migrate copies every row, layer and key; run again it copies nothing new; two workers serve the same heads and files', async () => {
    const first = await migrate(home);
    assert.equal(first.code, 0, first.stderr);
    assert.match(first.stderr, /verified/);
    const again = await migrate(home);
    assert.equal(again.code, 0, again.stderr);
    assert.match(again.stderr, /\(0 copied now\)/, 'a second run finds every layer there');
    const versions = await cluster.sql<{ n: string }>("SELECT COUNT(*) AS n FROM versions WHERE tenant_id <> ''");
    assert.ok(Number(versions[0].n) >= 1000, `${versions[0].n} versions`);

    // Two workers over the migrated stores, the embedded server's admin key in the first's home.
    const homes = ['w1', 'w2'].map((n) => { const h = path.join(dir, n); mkdirSync(h, { mode: 0o711 }); return h; });
    copyFileSync(path.join(home, 'admin.key'), path.join(homes[0], 'admin.key'));
    const w1 = await cluster.start('w1', {}, homes[0]);
    const w2 = await cluster.start('w2', {}, homes[1]);
    for (const w of [w1, w2]) {
      const admin = new Shellbase({ url: w.url, apiKey: source.adminKey });
      const acme = new Shellbase({ url: w.url, apiKey: source.tenantKey });
      for (const [who, client] of [['admin', admin], ['acme', acme]] as const) {
        const heads = Object.fromEntries((await client.contexts.list()).map((c) => [`${who}/${c.name}`, c.head]));
        for (const [k, v] of Object.entries(heads)) assert.equal(v, source.heads[k], `${k}'s head on ${w.name}`);
        for (const name of Object.keys(heads)) assert.equal(await filesHash(client, name.split('/')[1]), source.hashes[name], `${name}'s files on ${w.name}`);
      }
      assert.equal(Object.keys(source.heads).length, (await admin.contexts.list()).length + (await acme.contexts.list()).length);
    }
    // The cluster goes on from there; migrating again now would take that back, and is refused.
    await new Shellbase({ url: w2.url, apiKey: source.adminKey }).context('main').files.write('/root/after', 'after\n');
    const late = await migrate(home);
    assert.equal(late.code, 1);
    assert.match(late.stderr, /already serves this data/);
    assert.equal((await new Shellbase({ url: w1.url, apiKey: source.adminKey }).context('main').files.read('/root/after')).toString(), 'after\n', 'the cluster\'s write stays');
  });

  test('another server\'s home is refused by stores that hold this one\'s data, and changes nothing', async () => {
    const other = path.join(dir, 'other');
    const { child, sb } = await spawnServer(other);
    try {
      await sb.context('x').files.write('/root/x', 'x\n');
    } finally {
      await stopServer(child);
    }
    const before = await cluster.sql<{ n: string }>('SELECT COUNT(*) AS n FROM versions');
    const r = await migrate(other);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /already hold another server's data/);
    assert.deepEqual(await cluster.sql<{ n: string }>('SELECT COUNT(*) AS n FROM versions'), before);
    const bad = await migrate(other, 'sqlite:/x');
    assert.equal(bad.code, 1);
    assert.match(bad.stderr, /invalid_argument: a cluster keeps its metadata in Postgres/);
  });
});
