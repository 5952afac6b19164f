import assert from 'node:assert/strict';
import { readdirSync } from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { Shellbase } from '@shellbase/sdk';
import { sleep, startTestServer, type TestServer } from './harness.ts';

describe('garbage collection', () => {
  let t: TestServer;
  let alice: Shellbase;
  let aliceKey: string;
  /** A tenant that keeps no history past its last versions. */
  let bob: Shellbase;
  let bobKey: string;
  const layerDirs = () => new Set(readdirSync(path.join(t.home, 'store', 'layers')).filter((n) => !n.endsWith('.json')));
  const stored = async (sb: Shellbase) => (await sb.usage()).total.bytesStored;
  const freedTotal = async () => {
    const m = /^shellbase_gc_freed_bytes_total (\d+)$/m.exec((await t.http('GET', '/metrics', { key: null })).text);
    return Number(m?.[1]);
  };

  before(async () => {
    t = await startTestServer({ squashAbove: 6 });
    aliceKey = (await t.http('POST', '/v1/tenants', { body: { name: 'alice' } })).json.apiKey;
    alice = new Shellbase({ url: t.server.url, apiKey: aliceKey });
    const b = await t.http('POST', '/v1/tenants', { body: { name: 'bob', quotas: { retentionDays: 0, keepVersions: 3 } } });
    assert.equal(b.status, 201, b.text);
    bobKey = b.json.apiKey;
    bob = new Shellbase({ url: t.server.url, apiKey: bobKey });
  });
  after(async () => { await t?.close(); });

  test('only the admin runs it; history settings are validated', async () => {
    assert.equal((await t.http('POST', '/v1/gc', { key: bobKey })).status, 403);
    for (const quotas of [{ retentionDays: -1 }, { keepVersions: 0 }, { retentionDays: 'x' }]) {
      assert.equal((await t.http('POST', '/v1/tenants', { body: { name: 'q', quotas } })).status, 400, JSON.stringify(quotas));
    }
    const r = await t.sb.gc();
    assert.equal(typeof r.versionsDropped, 'number');
  });

  test('deleting a fork frees exactly the bytes only it held', async () => {
    const base = alice.context('base');
    await base.exec('head -c 1000000 /dev/urandom > /root/shared');
    await base.fork('fork');
    const fork = alice.context('fork');
    await fork.exec('head -c 300000 /dev/urandom > /root/one');
    await fork.exec('head -c 200000 /dev/urandom > /root/two');
    await t.sb.gc();
    const [bytesBefore, dirsBefore, freedBefore] = [await stored(alice), layerDirs(), await freedTotal()];
    assert.equal(bytesBefore, 1_500_000, 'the shared layer counts once');
    await fork.delete();
    await t.sb.gc();
    assert.equal(await stored(alice), 1_000_000);
    assert.equal(await freedTotal() - freedBefore, 500_000, 'exactly the fork\'s unique bytes');
    const dirsAfter = layerDirs();
    assert.equal(dirsBefore.size - dirsAfter.size, 2, 'its two layers left the disk');
    for (const d of dirsAfter) assert.ok(dirsBefore.has(d));
    assert.equal((await base.exec('stat -c %s /root/shared')).stdout, '1000000\n', 'the base is untouched');
  });

  test('history past retention goes, the last N versions stay, and squashed-away layers are deleted', async () => {
    const h = bob.context('hist');
    const freedBefore = await freedTotal();
    const ids: string[] = [];
    for (let i = 1; i <= 7; i++) ids.push((await h.exec(`head -c ${i * 1000} /dev/zero > /root/f${i}`)).version);
    await t.server.engine.squasher.idle(); // the 7th commit squashed the three oldest layers
    await t.sb.gc();
    const versions = await h.versions();
    assert.deepEqual(versions.map((v) => v.id), [ids[6], ids[5], ids[4]], 'bob keeps three versions');
    assert.equal(versions[2].parent, null, 'history starts at the oldest kept version');
    // The squash rewrote versions 3–7 onto one layer (6,000 bytes); the first three layers went
    // with the versions that still used them (whichever run, background or this one, took them).
    assert.equal(await stored(bob), 28_000);
    assert.equal(await freedTotal() - freedBefore, 6_000);
    const old = await t.http('POST', '/v1/contexts/hist/exec', { key: bobKey, body: { command: 'true', version: ids[0] } });
    assert.equal(old.status, 404);
    assert.equal((await h.exec('cat /root/f* | wc -c')).stdout, '28000\n', 'the head has every file');
  });

  test('a conflict version stays while its context lives and goes with it', async () => {
    const c = alice.context('conflicted');
    const v1 = (await c.exec('echo one > /root/x')).version;
    await c.exec('echo two > /root/x');
    const r = await c.exec('echo three > /root/x', { version: v1 });
    assert.ok(r.conflict, JSON.stringify(r));
    await t.sb.gc();
    assert.equal((await c.exec('cat /root/x', { version: r.conflict.version, commit: 'never' })).stdout, 'three\n');
    await c.delete();
    await t.sb.gc();
    const gone = await t.http('POST', '/v1/contexts/other/exec', { key: aliceKey, body: { command: 'true', version: r.conflict.version } });
    assert.equal(gone.status, 404);
  });

  test('a version a running query uses stays until the query ends', async () => {
    const p = bob.context('pinned');
    const v0 = (await p.exec('echo zero > /root/0')).version;
    const v1 = (await p.exec('echo first > /root/a')).version;
    // Started while v1 is still among the last versions (a background run may come at any time).
    const running = p.exec('sleep 2; cat /root/a; echo z > /root/z', { version: v1 });
    await sleep(300);
    for (let i = 0; i < 4; i++) await p.exec(`echo ${i} > /root/b${i}`);
    await t.sb.gc();
    const at = (v: string) => t.http('POST', '/v1/contexts/pinned/exec', { key: bobKey, body: { command: 'true', version: v, commit: 'never' } });
    assert.equal((await at(v0)).status, 404, 'a version below the pinned one went');
    assert.equal((await at(v1)).status, 200, 'the pinned one stays (and what leads from it to the head)');
    const r = await running;
    assert.equal(r.exitCode, 0, r.stderr);
    assert.equal(r.stdout, 'first\n');
    assert.equal(r.committed, true, `it rebased onto the head: ${JSON.stringify(r.conflict)}`);
    await t.sb.gc();
    assert.equal((await at(v1)).status, 404, 'unpinned, it went');
  });

  test('collection racing 20 concurrent queries breaks none of them', async () => {
    const names = ['r0', 'r1', 'r2', 'r3'];
    const firsts = new Map<string, string>();
    for (const n of names) firsts.set(n, (await bob.context(n).exec('echo 0 > /root/q0')).version);
    let done = false;
    const collector = (async () => {
      let runs = 0;
      while (!done) { await t.sb.gc(); runs++; await sleep(20); }
      return runs;
    })();
    const queries = Array.from({ length: 20 }, (_, i) => {
      const name = names[i % names.length];
      // Some run at the context's first version, which the collector would drop if they did not pin it.
      const version = i % 3 === 0 ? firsts.get(name) : undefined;
      return bob.context(name).exec(`echo ${i} > /root/q${i + 1}; sleep 0.${i % 5}; cat /root/q${i + 1}`, { version });
    });
    const results = await Promise.all(queries);
    done = true;
    assert.ok((await collector) >= 2, 'the collector ran during the queries');
    results.forEach((r, i) => {
      assert.equal(r.exitCode, 0, r.stderr);
      assert.equal(r.stdout, `${i}\n`);
      assert.equal(r.committed, true, `query ${i}: ${JSON.stringify(r.conflict)}`);
    });
    await t.sb.gc();
    for (const [k, n] of names.entries()) {
      const files = (await bob.context(n).exec('ls /root | sort -V | tr "\\n" " "')).stdout.trim().split(' ');
      const want = ['q0', ...Array.from({ length: 5 }, (_, j) => `q${k + 4 * j + 1}`)];
      assert.deepEqual(files.sort(), want.sort(), n);
    }
  });
});
