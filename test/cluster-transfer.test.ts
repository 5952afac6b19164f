import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { Shellbase } from '@shellbase/sdk';
import { startCluster, type ClusterWorkerProcess, type TestCluster } from './cluster-harness.ts';
import { startTestServer } from './harness.ts';

/** A digest of a context's files (names, types, modes, sizes, links, contents). */
const filesHash = async (sb: Shellbase, ctx: string) => (await sb.context(ctx).exec(
  "cd / && { find root -xdev -printf '%p %y %m %s %l\\n' | sort; find root -xdev -type f -print0 | sort -z | xargs -0 sha256sum; } | sha256sum",
  { commit: 'never' })).stdout;

const bytesOf = async (body: unknown) => {
  const parts: Uint8Array[] = [];
  for await (const c of body as AsyncIterable<Uint8Array>) parts.push(c);
  return Buffer.concat(parts);
};

describe('context export and import on a cluster', { timeout: 300_000 }, () => {
  let cluster: TestCluster;
  let w1: ClusterWorkerProcess;
  let w2: ClusterWorkerProcess;
  before(async () => {
    cluster = await startCluster();
    w1 = await cluster.start('w1');
    w2 = await cluster.start('w2');
  });
  after(async () => { await cluster?.stop(); });

  test('a context committed on one worker exports from another (its layers from the object store) and imports as a new context any worker serves', async () => {
    const src = w1.sb.context('src');
    await src.exec('head -c 3000000 /dev/urandom > /root/r && mkdir -p /root/d && echo one > /root/d/a && ln -s d/a /root/link');
    const v2 = (await src.files.write('/root/d/b', 'two\n')).version;
    const archive = await bytesOf(await w2.sb.contexts.export('src', { history: true }));
    const copy = await w2.sb.contexts.import(archive, { as: 'copy' });
    assert.equal(copy.head, v2, 'the same version ids');
    assert.equal(await filesHash(w1.sb, 'copy'), await filesHash(w1.sb, 'src'), 'the other worker serves the copy with the same files');
    // Back into the worker the context came from, under a third name: versions and layers are reused.
    assert.equal((await w1.sb.contexts.import(archive, { as: 'again' })).head, v2);
  });

  test('an archive of an embedded server imports into the cluster: its layers go to the object store, and every worker serves them', async () => {
    const t = await startTestServer();
    try {
      const ctx = t.sb.context('from-embedded');
      await ctx.exec('head -c 2000000 /dev/urandom > /root/r && echo hi > /root/hi');
      const head = (await ctx.files.write('/root/more', 'more\n')).version;
      const archive = await bytesOf(await t.sb.contexts.export('from-embedded', { history: true }));
      const before = Number((await cluster.sql<{ n: string }>('SELECT COUNT(*) AS n FROM cluster_layer_blobs'))[0].n);
      assert.equal((await w2.sb.contexts.import(archive)).head, head);
      const after = Number((await cluster.sql<{ n: string }>('SELECT COUNT(*) AS n FROM cluster_layer_blobs'))[0].n);
      assert.equal(after - before, 2, 'each imported layer stored and recorded');
      const want = await filesHash(t.sb, 'from-embedded');
      assert.equal(await filesHash(w2.sb, 'from-embedded'), want);
      assert.equal(await filesHash(w1.sb, 'from-embedded'), want, 'a worker that did not import it fetches its layers');
    } finally {
      await t.close();
    }
  });
});
