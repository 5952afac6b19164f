import assert from 'node:assert/strict';
import { execFile, type ChildProcess } from 'node:child_process';
import { promisify } from 'node:util';
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { Shellbase } from '@shellbase/sdk';
import { exited, sleep, spawnServer, startTestServer, stopServer, type TestServer } from './harness.ts';

// Mounts: one context (a volume) shown in another's queries, read-only at a version or writable,
// its writes committed into it together with the query's own, over real bwrap and overlayfs.
describe('mounts: contexts mounted into queries', () => {
  let t: TestServer;
  before(async () => {
    t = await startTestServer();
    await t.sb.context('data').exec('mkdir -p /srv && echo one > /srv/a.txt');
  });
  after(async () => { await t?.close(); });

  const versions = async (ctx: string) => (await t.http('GET', `/v1/contexts/${ctx}/versions?limit=50`)).json.versions as { id: string; cause: Record<string, any> }[];

  test('read-only: the command sees the version it asked for, cannot write it, and its version records what it saw', async () => {
    const data = t.sb.context('data');
    const first = (await t.sb.contexts.get('data')).head;
    await data.files.write('/srv/a.txt', 'two\n');
    const head = (await t.sb.contexts.get('data')).head;
    const r = await t.sb.context('ro').exec('cat /mnt/d/srv/a.txt; echo x > /mnt/d/srv/b.txt; echo rc=$?; echo mine > /root/mine.txt', {
      mounts: [{ context: 'data', path: '/mnt/d', readOnly: true }],
    });
    assert.match(r.stdout, /^two\nrc=1\n$/, r.stderr);
    assert.match(r.stderr, /Read-only file system/);
    assert.equal(r.committed, true);
    assert.deepEqual(r.mounts, [{ context: 'data', path: '/mnt/d', readOnly: true, baseVersion: head, version: head, committed: false }]);
    const [v] = await versions('ro');
    assert.equal(v.id, r.version);
    assert.deepEqual(v.cause.mounts, [{ context: 'data', path: '/mnt/d', version: head, readOnly: true }]);
    assert.equal((await t.sb.contexts.get('data')).head, head, 'nothing was written into the volume');
    // The mount point is not one of the query's writes: its only change is its own file.
    const diff = await t.http('GET', `/v1/contexts/ro/diff?from=${r.baseVersion}&to=${r.version}`);
    assert.deepEqual(diff.json.changes.map((c: { path: string }) => c.path), ['/root/mine.txt']);
    // A pinned version shows that version, on the cold path (stdin) as on the warm one.
    const old = await t.sb.context('ro').exec('cat /mnt/d/srv/a.txt', { stdin: 'x', mounts: [{ context: 'data', path: '/mnt/d', readOnly: true, version: first }] });
    assert.equal(old.stdout, 'one\n', old.stderr);
  });

  test('writable: the volume\'s new version and the query\'s commit together, and name each other', async () => {
    const r = await t.sb.context('rw').exec('echo hello > /mnt/data/srv/new.txt && echo own > /root/own.txt', { mounts: [{ context: 'data', path: '/mnt/data' }] });
    assert.equal(r.exitCode, 0, r.stderr);
    assert.equal(r.committed, true);
    const m = r.mounts![0];
    assert.equal(m.committed, true);
    assert.notEqual(m.version, m.baseVersion);
    assert.equal((await t.sb.contexts.get('data')).head, m.version);
    assert.equal((await t.sb.context('data').files.read('/srv/new.txt')).toString(), 'hello\n');
    assert.equal((await t.sb.context('rw').files.read('/root/own.txt')).toString(), 'own\n');
    await assert.rejects(t.sb.context('rw').files.read('/mnt/data/srv/new.txt'), /not_found|does not exist/, 'the volume\'s files are not the query\'s');
    const [dv] = await versions('data');
    assert.deepEqual(dv.cause.mountedBy, { context: 'rw', path: '/mnt/data', version: r.version });
    const [rv] = await versions('rw');
    assert.deepEqual(rv.cause.mounts, [{ context: 'data', path: '/mnt/data', version: m.baseVersion, readOnly: false, wrote: m.version }]);
    // Only the volume written: the query's context does not move.
    const before = (await t.sb.contexts.get('rw')).head;
    const only = await t.sb.context('rw').exec('echo again > /mnt/data/srv/again.txt', { mounts: [{ context: 'data', path: '/mnt/data' }] });
    assert.equal(only.version, before);
    assert.equal(only.mounts![0].committed, true);
    assert.equal((await t.sb.context('data').files.read('/srv/again.txt')).toString(), 'again\n');
    const [dv2] = await versions('data');
    assert.deepEqual(dv2.cause.mountedBy, { context: 'rw', path: '/mnt/data', version: before });
  });

  test('two writers at once: disjoint paths both land; the same path conflicts and loses nothing', async () => {
    const mounts = [{ context: 'data', path: '/mnt/data' }];
    const slow = (file: string, text: string) => `sleep 0.5; echo ${text} > /mnt/data/srv/${file}`;
    const [a, b] = await Promise.all([t.sb.context('w1').exec(slow('w1.txt', 'one'), { mounts }), t.sb.context('w2').exec(slow('w2.txt', 'two'), { mounts })]);
    assert.ok(a.mounts![0].committed && b.mounts![0].committed, `both committed (one rebased): ${JSON.stringify([a, b])}`);
    assert.ok(!a.committed && !b.committed, 'their own contexts had nothing to commit');
    const files = t.sb.context('data').files;
    assert.equal((await files.read('/srv/w1.txt')).toString(), 'one\n');
    assert.equal((await files.read('/srv/w2.txt')).toString(), 'two\n');

    const head = (await t.sb.contexts.get('data')).head;
    const same = (text: string) => `sleep 0.5; echo ${text} > /mnt/data/srv/same.txt; echo ${text} > /root/mine.txt`;
    const [x, y] = await Promise.all([t.sb.context('w1').exec(same('x'), { mounts }), t.sb.context('w2').exec(same('y'), { mounts })]);
    const [won, lost] = x.committed ? [x, y] : [y, x];
    assert.equal(won.committed, true);
    assert.equal(lost.committed, false, 'the second writer of the same file conflicts');
    assert.deepEqual(lost.conflict?.paths, ['/mnt/data/srv/same.txt']);
    assert.equal(lost.mounts![0].committed, false);
    assert.ok(lost.mounts![0].conflict, 'its mount names the conflict');
    const lostCtx = lost === x ? 'w1' : 'w2';
    assert.equal((await t.sb.contexts.get(lostCtx)).head, lost.baseVersion, 'neither of its heads moved');
    assert.equal((await t.sb.contexts.get('data')).head, won.mounts![0].version);
    assert.notEqual(won.mounts![0].version, head);
    // Its work is kept, unattached: the volume's part readable at the conflict's version.
    const kept = lost.mounts![0].conflict!.version;
    assert.equal((await t.sb.context('data').files.read('/srv/same.txt', { version: kept })).toString(), `${lost === x ? 'x' : 'y'}\n`);
    // onConflict: retry runs it again over both new heads.
    const again = await t.sb.context(lostCtx).exec(same('z'), { mounts, onConflict: 'retry' });
    assert.equal(again.committed, true);
    assert.equal((await t.sb.context('data').files.read('/srv/same.txt')).toString(), 'z\n');
  });

  test('services: a writable mount\'s writes commit when the service\'s do; a read-only one shows the head at each start', async () => {
    await t.sb.context('svc-vol').files.write('/root/.keep', '');
    const ctx = t.sb.context('svc');
    const svc = await ctx.services.create({
      name: 'web', port: 8000, idleTimeoutMs: 60_000,
      command: 'date +%s%N >> /mnt/v/root/starts; cat /mnt/d/srv/a.txt > /root/seen.txt; exec python3 -m http.server 8000',
      mounts: [{ context: 'svc-vol', path: '/mnt/v' }, { context: 'data', path: '/mnt/d', readOnly: true }],
    });
    assert.deepEqual(svc.mounts, [{ context: 'svc-vol', path: '/mnt/v', readOnly: false }, { context: 'data', path: '/mnt/d', readOnly: true }]);
    const wakeAndStop = async () => {
      assert.equal((await fetch(svc.pathUrl)).status, 200);
      await ctx.services.stop('web');
    };
    await wakeAndStop();
    assert.equal((await t.sb.context('svc-vol').files.read('/root/starts')).toString().split('\n').filter(Boolean).length, 1, 'the volume has the first run\'s write');
    const seen1 = (await ctx.files.read('/root/seen.txt')).toString();
    assert.equal(seen1, (await t.sb.context('data').files.read('/srv/a.txt')).toString());
    const [own] = await versions('svc');
    assert.equal(own.cause.kind, 'service');
    assert.equal(own.cause.mounts.length, 2);
    assert.equal((await versions('svc-vol'))[0].cause.mountedBy.version, own.id, 'the two commits name each other');
    await t.sb.context('data').files.write('/srv/a.txt', 'changed\n');
    await wakeAndStop();
    assert.equal((await ctx.files.read('/root/seen.txt')).toString(), 'changed\n', 'the next start saw the volume\'s new head');
    assert.equal((await t.sb.context('svc-vol').files.read('/root/starts')).toString().split('\n').filter(Boolean).length, 2);
    await ctx.services.remove('web');
    const bad = await t.http('POST', '/v1/contexts/svc/services', { body: { name: 'bad', command: 'true', port: 8001, mounts: [{ context: 'nowhere', path: '/mnt/x' }] } });
    assert.equal(bad.status, 404, bad.text);
  });

  test('the CLI: --mount CTX:/PATH[:ro][@VERSION], repeatable', async () => {
    const cli = async (...args: string[]) => {
      try {
        const r = await promisify(execFile)(process.execPath, [path.resolve('packages/cli/dist/main.js'), ...args], { env: { ...process.env, SHELLBASE_URL: t.server.url, SHELLBASE_API_KEY: t.key } });
        return { code: 0, ...r };
      } catch (e) { return e as { code: number; stdout: string; stderr: string }; }
    };
    const first = (await t.sb.context('data').versions({ limit: 1000 })).at(-1)!.id;
    await t.sb.context('other').files.write('/srv/o.txt', 'other\n');
    const r = await cli('exec', 'cli', '--mount', 'data:/mnt/d:ro', '--mount', 'other:/mnt/o', '--', 'bash', '-c', 'cat /mnt/d/srv/a.txt /mnt/o/srv/o.txt && echo via-cli > /mnt/o/srv/cli.txt');
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, `${(await t.sb.context('data').files.read('/srv/a.txt')).toString()}other\n`);
    assert.equal((await t.sb.context('other').files.read('/srv/cli.txt')).toString(), 'via-cli\n');
    const old = await cli('exec', 'cli', '--mount', `data:/mnt/d:ro@${first}`, '--', 'bash', '-c', 'test -e /mnt/d/srv/a.txt || echo absent');
    assert.equal(old.code, 0, old.stderr);
    assert.equal(old.stdout, 'absent\n', 'the image\'s version, before /srv/a.txt was written');
    const bad = await cli('exec', 'cli', '--mount', 'data', '--', 'true');
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /--mount takes CTX:\/PATH/);
  });

  test('bad mounts are refused with typed errors and make nothing', async () => {
    const exec = (mounts: unknown[], ctx = 'fresh') => t.http('POST', `/v1/contexts/${ctx}/exec`, { body: { command: 'true', mounts } });
    const cases: [unknown[], number, RegExp][] = [
      [[{ context: 'data', path: '/' }], 400, /./],
      [[{ context: 'data', path: '/proc/x' }], 400, /not part of a context/],
      [[{ context: 'data', path: '/dev' }], 400, /not part of a context/],
      [[{ context: 'data', path: '/sys/fs' }], 400, /not part of a context/],
      [[{ context: 'data', path: '/mnt/../etc' }], 400, /normalized/],
      [[{ context: 'data', path: 'mnt' }], 400, /normalized/],
      [[{ context: 'data', path: '/mnt/a' }, { context: 'rw', path: '/mnt/a/b' }], 400, /inside mount/],
      [[{ context: 'data', path: '/mnt/a' }, { context: 'rw', path: '/mnt/a' }], 400, /same path/],
      [[{ context: 'data', path: '/mnt/a' }, { context: 'data', path: '/mnt/b' }], 400, /mounted twice/],
      [[{ context: 'fresh', path: '/mnt/a' }], 400, /own query/],
      [[{ context: 'missing', path: '/mnt/a' }], 404, /missing/],
      [[{ context: 'data', path: '/mnt/a', version: 'v_nope' }], 404, /./],
      [Array.from({ length: 17 }, (_, i) => ({ context: `c${i}`, path: `/m${i}` })), 400, /./],
      [[{ context: 'data', path: '/mnt/a', extra: 1 }], 400, /./],
      [[{ context: 'data', path: '/mnt/a,upperdir=/tmp/x,workdir=/tmp/y', readOnly: true }], 400, /character/],
      [[{ context: 'data', path: '/mnt/a:b' }], 400, /character/],
      [[{ context: 'data', path: '/mnt/*' }], 400, /character/],
      [[{ context: 'data', path: '/mnt/a b' }], 400, /character/],
      [[{ context: 'data', path: '/bin/x' }], 400, /runs through \/bin, a symlink/],
    ];
    for (const [mounts, status, message] of cases) {
      const r = await exec(mounts);
      assert.equal(r.status, status, `${JSON.stringify(mounts)}: ${r.text}`);
      assert.ok(r.json.error?.code, r.text);
      assert.match(r.json.error.message, message, r.text);
    }
    assert.equal((await t.http('GET', '/v1/contexts/fresh')).status, 404, 'the query\'s context was not made');
    // A mount point the query's tree hides (a directory made again, opaque; an empty context) is refused, and a
    // service's writable mount may not pin a version.
    await t.sb.context('opaque').exec('rm -rf /mnt && mkdir /mnt');
    assert.match((await exec([{ context: 'data', path: '/mnt/x' }], 'opaque')).json.error.message, /hidden/);
    await t.sb.contexts.create({ name: 'void', empty: true });
    assert.match((await exec([{ context: 'data', path: '/mnt/x' }], 'void')).json.error.message, /hidden/);
    const pinned = await t.http('POST', '/v1/contexts/svc2/services', { body: { name: 's', command: 'true', port: 8000, mounts: [{ context: 'data', path: '/mnt/d', version: (await t.sb.contexts.get('data')).head }] } });
    assert.equal(pinned.status, 400, pinned.text);
    assert.equal((await t.http('GET', '/v1/contexts/svc2')).status, 404);
    // Another tenant's context is not found (and not told apart from a missing one).
    const other = new (t.sb.constructor as typeof import('@shellbase/sdk').Shellbase)({ url: t.server.url, apiKey: (await t.sb.tenants.create('other')).apiKey });
    await assert.rejects(other.context('mine').exec('true', { mounts: [{ context: 'data', path: '/mnt/a' }] }), (e: { code?: string; message: string }) => e.code === 'not_found' && /"data"/.test(e.message));
    // A mount point behind a symlink or a file of the query's context.
    await t.sb.context('links').exec('ln -s /etc /root/etc-link && touch /root/file');
    for (const p of ['/root/etc-link/x', '/root/file/x', '/root/file']) {
      const r = await exec([{ context: 'data', path: p }], 'links');
      assert.equal(r.status, 400, r.text);
      assert.match(r.json.error.message, /runs through/);
    }
  });
});

describe('mounts: kill -9 while writable mounts commit', () => {
  const home = mkdtempSync(path.join(tmpdir(), 'shellbase-mounts-crash-'));
  chmodSync(home, 0o711);
  let current: ChildProcess | null = null;
  after(async () => {
    if (current) await stopServer(current);
    rmSync(home, { recursive: true, force: true });
  });

  /** Each version of `ctx`'s head ancestry, by id. */
  const ancestry = async (sb: Shellbase, ctx: string) => {
    const versions = await sb.context(ctx).versions({ limit: 10000 });
    return new Map(versions.map((v) => [v.id, v as typeof v & { cause: Record<string, any> }]));
  };

  test('both contexts are at complete versions after every crash, and neither has a version the other lacks', async () => {
    const acked: { ctx: string; key: string }[] = [];
    let seq = 0;
    const workers = ['q0', 'q1', 'q2'];
    for (let round = 0; round < 3; round++) {
      const { child, sb } = await spawnServer(home);
      current = child;
      if (round === 0) await sb.context('vol').files.write('/root/.keep', '');
      let stop = false;
      const runs = workers.map(async (ctx) => {
        while (!stop) {
          const k = `${ctx}-${seq++}`;
          try {
            const r = await sb.context(ctx).exec(`echo ${k} > /mnt/v/root/${k} && echo ${k} > /root/${k}`, { mounts: [{ context: 'vol', path: '/mnt/v' }], onConflict: 'retry' });
            if (r.committed && r.mounts?.[0].committed) acked.push({ ctx, key: k });
          } catch (e) {
            if (!stop && !/fetch failed|ECONNRE|socket/i.test(String((e as Error).cause ?? e))) throw e;
            break; // the server died under us
          }
        }
      });
      await sleep(500 + Math.random() * 1500);
      for (const until = performance.now() + 30_000; acked.length === 0 && performance.now() < until;) await sleep(50);
      child.kill('SIGKILL');
      stop = true;
      await Promise.all(runs);
      await exited(child);
    }
    const { child, sb } = await spawnServer(home);
    current = child;
    assert.ok(acked.length > 0, 'the workload made progress');
    const vol = await ancestry(sb, 'vol');
    const volFiles = new Set((await sb.context('vol').exec('ls /root', { commit: 'never' })).stdout.split('\n'));
    for (const ctx of workers) {
      const own = await ancestry(sb, ctx);
      const files = new Set((await sb.context(ctx).exec('ls /root', { commit: 'never' })).stdout.split('\n'));
      for (const a of acked.filter((x) => x.ctx === ctx)) {
        assert.ok(files.has(a.key), `${ctx}: acknowledged write ${a.key} is present`);
        assert.ok(volFiles.has(a.key), `vol: acknowledged write ${a.key} is present`);
      }
      // Every version of the query's context that wrote through the mount has its volume version, and back.
      for (const v of own.values()) {
        const wrote = v.cause.mounts?.[0]?.wrote;
        if (wrote) assert.ok(vol.has(wrote), `${ctx}'s ${v.id} wrote ${wrote}, which is in vol's history`);
      }
      for (const v of vol.values()) {
        if (v.cause.mountedBy?.context === ctx) assert.ok(own.has(v.cause.mountedBy.version), `vol's ${v.id} came with ${ctx}'s ${v.cause.mountedBy.version}`);
      }
    }
  });
});
