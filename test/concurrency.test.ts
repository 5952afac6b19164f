import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { startTestServer, type TestServer } from './harness.ts';

describe('optimistic concurrency: rebase and conflict', () => {
  let t: TestServer;
  before(async () => { t = await startTestServer(); });
  after(async () => { await t?.close(); });

  test('20 concurrent queries each writing its own file all land, each as its own version', async () => {
    const ctx = t.sb.context('many');
    const base = (await ctx.exec('true')).version;
    const results = await Promise.all(Array.from({ length: 20 }, (_, i) =>
      ctx.exec(`sleep 0.2; echo ${i} > /root/file-${i}`)));
    for (const r of results) {
      assert.equal(r.committed, true, JSON.stringify(r));
      assert.equal(r.conflict, undefined);
    }
    assert.ok(results.filter((r) => r.baseVersion === base).length >= 2, 'queries ran side by side over one base and rebased');
    const ids = new Set(results.map((r) => r.version));
    assert.equal(ids.size, 20, 'twenty distinct versions');
    const versions = await ctx.versions({ limit: 25 });
    assert.deepEqual(new Set(versions.slice(0, 20).map((v) => v.id)), ids, 'all twenty are in the lineage of the head');
    const all = await ctx.exec('cat /root/file-* | sort -n | tr "\\n" " "');
    assert.equal(all.stdout, Array.from({ length: 20 }, (_, i) => i).join(' ') + ' ');
  });

  test('2 concurrent queries writing the same file: one commits, the other reports a readable conflict', async () => {
    const ctx = t.sb.context('clash');
    await ctx.exec('echo start > /root/shared');
    const [a, b] = await Promise.all([
      ctx.exec('sleep 0.3; echo A > /root/shared'),
      ctx.exec('sleep 0.3; echo B > /root/shared'),
    ]);
    const winner = a.committed ? a : b;
    const loser = a.committed ? b : a;
    assert.equal(winner.committed, true);
    assert.equal(loser.committed, false);
    assert.deepEqual(loser.conflict?.paths, ['/root/shared']);
    assert.equal(loser.version, winner.version, 'the head stays at the winner');
    const kept = await ctx.at(loser.conflict!.version).exec('cat /root/shared');
    assert.equal(kept.stdout, a.committed ? 'B\n' : 'A\n', 'the losing work is kept as an unattached version');
    assert.equal((await ctx.exec('cat /root/shared')).stdout, a.committed ? 'A\n' : 'B\n');
    // The unattached version can be forked.
    const rescued = await ctx.fork('clash-rescued', { version: loser.conflict!.version });
    assert.equal((await rescued.exec('cat /root/shared')).stdout, kept.stdout);
  });

  test('a delete of a directory conflicts with a write beneath it', async () => {
    const ctx = t.sb.context('tree');
    await ctx.exec('mkdir -p /srv/app && echo v1 > /srv/app/conf');
    const [del, write] = await Promise.all([
      ctx.exec('sleep 0.3; rm -rf /srv/app'),
      ctx.exec('sleep 0.3; echo v2 > /srv/app/conf'),
    ]);
    assert.equal([del, write].filter((r) => r.committed).length, 1);
    const loser = del.committed ? write : del;
    assert.ok(loser.conflict!.paths.some((p) => p.startsWith('/srv/app')), JSON.stringify(loser.conflict));
  });

  test('onConflict: retry re-runs the command on the new head', async () => {
    const ctx = t.sb.context('counter');
    await ctx.exec('echo 0 > /root/n');
    const bump = 'n=$(cat /root/n); sleep 0.2; echo $((n+1)) > /root/n';
    const results = await Promise.all(Array.from({ length: 4 }, () => ctx.exec(bump, { onConflict: 'retry' })));
    assert.ok(results.every((r) => r.committed), JSON.stringify(results.map((r) => [r.committed, r.retries])));
    assert.ok(results.some((r) => (r.retries ?? 0) > 0), 'some query was retried');
    assert.equal((await ctx.exec('cat /root/n')).stdout, '4\n', 'no increment was lost');
  });
});
