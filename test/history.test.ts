import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { startTestServer, type TestServer } from './harness.ts';

describe('writes, deletes, diff, merge and reset', () => {
  let t: TestServer;
  before(async () => { t = await startTestServer({ defaults: { memoryMb: 1024, pids: 512, cpus: 1, diskMb: 16, outputBytes: 1 << 20, timeoutMs: 60_000 } }); });
  after(async () => { await t?.close(); });

  const put = (ctx: string, path: string, body: string | Uint8Array, query = '') =>
    fetch(`${t.server.url}/v1/contexts/${ctx}/files${path}${query}`, { method: 'PUT', body, headers: { authorization: `Bearer ${t.key}` } })
      .then(async (r) => ({ status: r.status, json: await r.json() as any }));
  const sh = async (ctx: string, cmd: string) => (await t.sb.context(ctx).exec(cmd, { commit: 'never' })).stdout;

  test('a write is a one-layer version; parents are made, existing ones keep their attributes', async () => {
    const r = await put('w', '/root/new/deep/file.txt', 'hello\n', '?mode=0600');
    assert.equal(r.status, 200, JSON.stringify(r.json));
    const versions = await t.sb.context('w').versions();
    assert.equal(versions[0].id, r.json.version);
    assert.equal(versions[0].cause.kind, 'write');
    assert.equal(await sh('w', 'cat /root/new/deep/file.txt; stat -c "%a %U" /root/new/deep/file.txt /root /root/new'), 'hello\n600 root\n700 root\n755 root\n');
  });

  test('writes follow symlinked parents as the kernel would', async () => {
    assert.equal((await put('w', '/bin/my-tool', '#!/bin/sh\necho tool\n', '?mode=0755')).status, 200);
    assert.equal(await sh('w', 'test -L /bin && ls -l /usr/bin/my-tool | cut -c1-10; my-tool; ls /bin | wc -l | tr -d "\\n"; echo'),
      '-rwxr-xr-x\ntool\n' + (await sh('w', 'ls /usr/bin | wc -l')));
  });

  test('a write overlapping a change committed meanwhile is a 409 that keeps the attempt', async () => {
    await put('race', '/root/shared', 'start\n');
    let release!: () => void;
    const held = new Promise<void>((r) => { release = r; });
    // A slow upload: its layer is built over the head it read before the other write lands.
    const body = new ReadableStream<Uint8Array>({
      async start(controller) {
        controller.enqueue(new TextEncoder().encode('slow '));
        await held;
        controller.enqueue(new TextEncoder().encode('writer\n'));
        controller.close();
      },
    });
    const slow = fetch(`${t.server.url}/v1/contexts/race/files/root/shared`, {
      method: 'PUT', body, headers: { authorization: `Bearer ${t.key}` }, duplex: 'half',
    } as RequestInit);
    await new Promise((r) => setTimeout(r, 300));
    assert.equal((await put('race', '/root/shared', 'fast writer\n')).status, 200);
    release();
    const res = await slow;
    const json = await res.json() as any;
    assert.equal(res.status, 409, JSON.stringify(json));
    assert.equal(json.error.code, 'conflict');
    assert.deepEqual(json.error.details.paths, ['/root/shared']);
    assert.equal(await sh('race', 'cat /root/shared'), 'fast writer\n');
    const kept = await t.sb.context('race').at(json.error.details.version).files.read('/root/shared');
    assert.equal(kept.toString(), 'slow writer\n', 'the attempted write is kept');
  });

  test('bad writes change nothing', async () => {
    const head = (await t.sb.context('w').info()).head;
    assert.equal((await put('w', '/root', 'x')).status, 400, 'a directory');
    assert.equal((await put('w', '/root/new/deep/file.txt/below', 'x')).status, 400, 'under a file');
    const big = await put('w', '/root/big', new Uint8Array(20 * 1024 * 1024));
    assert.equal(big.status, 413);
    assert.equal(big.json.error.code, 'payload_too_large');
    assert.equal((await t.sb.context('w').info()).head, head);
  });

  test('a tar upload is one version; parents go through symlinks; nothing escapes the staging sandbox', async () => {
    const src = mkdtempSync(path.join(tmpdir(), 'shellbase-tar-'));
    try {
      execFileSync('bash', ['-c', [
        `cd ${src}`, 'mkdir -p pkg/sub bin', 'echo a > pkg/a', 'echo b > pkg/sub/b', 'ln -s a pkg/link',
        'printf "#!/bin/sh\\necho tool\\n" > bin/mytool', 'chmod 755 bin/mytool',
        // A directory the version has keeps its own attributes (/root stays 0700).
        'mkdir -m 0755 root', 'tar -cf ../ok.tar .',
        // An archive that plants a symlink to /etc and then writes through it.
        'mkdir evil && cd evil && ln -s /etc esc && tar -cf ../../evil.tar esc && mkdir x && echo pwn > x/passwd',
        "tar --transform 's,^x,esc,' -rf ../../evil.tar x/passwd",
      ].join(' && ')]);
      await t.sb.contexts.create({ name: 'tar' });
      const before = (await t.sb.context('tar').versions()).length;
      const ok = await put('tar', '/', readFileSync(path.join(src, '..', 'ok.tar')), '?format=tar');
      assert.equal(ok.status, 200, JSON.stringify(ok.json));
      assert.equal((await t.sb.context('tar').versions()).length, before + 1, 'one version');
      assert.equal(await sh('tar', 'cat /pkg/a /pkg/sub/b /pkg/link; test -L /bin && mytool; stat -c %a /root'), 'a\nb\na\ntool\n700\n');
      const evil = await put('tar', '/up', readFileSync(path.join(src, '..', 'evil.tar')), '?format=tar');
      assert.equal(evil.status, 400);
      assert.equal(readFileSync('/etc/passwd', 'utf8').includes('pwn'), false, 'the host is untouched');
      assert.equal(await sh('tar', 'grep -c pwn /etc/passwd; test -e /up || echo no-up'), '0\nno-up\n');
    } finally {
      rmSync(src, { recursive: true, force: true });
      rmSync(path.join(src, '..', 'ok.tar'), { force: true });
      rmSync(path.join(src, '..', 'evil.tar'), { force: true });
    }
  });

  test('deletes: files, symlinks (not their targets), directories only with recursive', async () => {
    await t.sb.context('d').exec('mkdir -p /data/sub && echo 1 > /data/sub/f && ln -s /etc/hostname /data/link');
    const del = (p: string, q = '') => t.http('DELETE', `/v1/contexts/d/files${p}${q}`);
    assert.equal((await del('/data/link')).status, 200);
    assert.equal(await sh('d', 'ls /data; test -f /etc/hostname && echo target-kept'), 'sub\ntarget-kept\n');
    const refused = await del('/data');
    assert.equal(refused.status, 400);
    assert.match(refused.json.error.hint, /recursive=true/);
    assert.equal((await del('/data', '?recursive=true')).status, 200);
    assert.equal(await sh('d', 'ls -d /data 2>&1 | grep -c "No such"'), '1\n');
    assert.equal((await del('/data')).status, 404);
    assert.equal((await del('/etc/motd')).status, 200, 'a file of the image');
    assert.equal(await sh('d', 'test -e /etc/motd || echo gone'), 'gone\n');
  });

  test('diff: added, modified and deleted with types and sizes, and a unified diff of one file', async () => {
    const ctx = t.sb.context('diff');
    const from = (await ctx.exec('mkdir /data && echo one > /data/a && echo keep > /data/b && echo x > /data/gone && ln -s a /data/l')).version;
    const to = (await ctx.exec('echo two >> /data/a && rm /data/gone && echo new > /data/c && ln -sfn b /data/l && touch /data/b')).version;
    const r = await t.http('GET', `/v1/contexts/diff/diff?from=${from}&to=${to}`);
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(r.json.changes, [
      { path: '/data/a', kind: 'modified', type: 'file', size: 8 },
      { path: '/data/c', kind: 'added', type: 'file', size: 4 },
      { path: '/data/gone', kind: 'deleted', type: 'file', size: 2 },
      { path: '/data/l', kind: 'modified', type: 'symlink' },
    ]);
    const one = await t.http('GET', `/v1/contexts/diff/diff?from=${from}&path=/data/a`);
    assert.equal(one.json.patch, '--- a/data/a\n+++ b/data/a\n@@ -1 +1,2 @@\n one\n+two\n');
    const defaults = await t.http('GET', '/v1/contexts/diff/diff');
    assert.deepEqual(defaults.json.changes, r.json.changes, 'to defaults to the head, from to its parent');
  });

  test('diff across forks that share an ancestor', async () => {
    const a = t.sb.context('fa');
    await a.exec('echo base > /base');
    const b = await a.fork('fb');
    const va = (await a.exec('echo a > /only-a')).version;
    const vb = (await b.exec('echo b > /only-b')).version;
    const r = await t.http('GET', `/v1/contexts/fa/diff?from=${va}&to=${vb}`);
    assert.deepEqual(r.json.changes.map((c: { path: string; kind: string }) => `${c.kind} ${c.path}`), ['deleted /only-a', 'added /only-b']);
  });

  test('merge: disjoint changes make one version; overlapping ones are a 409 that changes nothing', async () => {
    const main = t.sb.context('m');
    await main.exec('mkdir -p /app && echo v1 > /app/conf && echo keep > /app/keep && mkdir /app/tree && echo t > /app/tree/x');
    const fork = await main.fork('m-fork');
    await fork.exec('echo feature > /app/feature && echo changed > /app/keep');
    await main.exec('echo main > /app/main-only');
    const merged = await t.http('POST', '/v1/contexts/m/merge', { body: { from: 'm-fork' } });
    assert.equal(merged.status, 200, merged.text);
    assert.equal(await sh('m', 'cat /app/feature /app/keep /app/main-only /app/conf'), 'feature\nchanged\nmain\nv1\n');
    const [mergeVersion, ...older] = await main.versions();
    assert.equal(mergeVersion.cause.kind, 'merge');
    assert.equal(mergeVersion.merged, (await fork.versions())[0].id, 'a merge names the source\'s version it merged');
    assert.ok(older.every((v) => v.merged === undefined), 'other versions have no merged');
    const again = await t.http('POST', '/v1/contexts/m/merge', { body: { from: 'm-fork' } });
    assert.equal(again.json.version, merged.json.version, 'nothing new to merge');

    const cases: [string, string, string[]][] = [
      ['echo fork > /app/conf', 'echo main > /app/conf', ['/app/conf']],
      ['rm /app/conf', 'echo main > /app/conf', ['/app/conf']],
      ['rm -rf /app/tree && echo file > /app/tree', 'echo y > /app/tree/y', ['/app/tree']],
    ];
    for (const [i, [theirs, ours, paths]] of cases.entries()) {
      const f = await main.fork(`m-conflict-${i}`);
      await f.exec(theirs);
      await main.exec(ours);
      const head = (await main.info()).head;
      const r = await t.http('POST', '/v1/contexts/m/merge', { body: { from: `m-conflict-${i}` } });
      assert.equal(r.status, 409, `${theirs} / ${ours}: ${r.text}`);
      assert.equal(r.json.error.code, 'conflict');
      assert.deepEqual(r.json.error.details.paths, paths);
      assert.equal((await main.info()).head, head, 'nothing changed');
    }
  });

  test('merging the same fork again uses the last merge as its base', async () => {
    const main = t.sb.context('rm');
    await main.exec('mkdir -p /app && echo v1 > /app/keep && echo v1 > /app/other');
    const fork = await main.fork('rm-fork');
    await fork.exec('echo fork > /app/keep');
    assert.equal((await t.http('POST', '/v1/contexts/rm/merge', { body: { from: 'rm-fork' } })).status, 200);
    await main.exec('echo main-again > /app/keep');
    await fork.exec('echo fork > /app/other');
    const again = await t.http('POST', '/v1/contexts/rm/merge', { body: { from: 'rm-fork' } });
    assert.equal(again.status, 200, `the fork's first change is already merged: ${again.text}`);
    assert.equal(await sh('rm', 'cat /app/keep /app/other'), 'main-again\nfork\n');
    // And back: the fork takes main's side without conflict.
    const back = await t.http('POST', '/v1/contexts/rm-fork/merge', { body: { from: 'rm' } });
    assert.equal(back.status, 200, back.text);
    assert.equal(await sh('rm-fork', 'cat /app/keep /app/other'), 'main-again\nfork\n');
  });

  test('merge into an untouched target fast-forwards', async () => {
    const base = t.sb.context('ff');
    await base.exec('echo 1 > /one');
    const f = await base.fork('ff-fork');
    await f.exec('echo 2 > /two');
    const r = await t.http('POST', '/v1/contexts/ff/merge', { body: { from: 'ff-fork' } });
    assert.equal(r.status, 200);
    assert.equal(await sh('ff', 'cat /one /two'), '1\n2\n');
  });

  test('reset moves the head back; later versions stay and can be reset to again', async () => {
    const ctx = t.sb.context('tt');
    const v1 = (await ctx.exec('echo 1 > /n')).version;
    const v2 = (await ctx.exec('echo 2 > /n')).version;
    const r = await t.http('POST', '/v1/contexts/tt/reset', { body: { version: v1 } });
    assert.equal(r.status, 200, r.text);
    assert.equal(await sh('tt', 'cat /n'), '1\n');
    const versions = await ctx.versions();
    assert.equal(versions[0].cause.kind, 'reset');
    assert.ok(versions.some((v) => v.id === v2), 'the later version is still in the history');
    await t.http('POST', '/v1/contexts/tt/reset', { body: { version: v2 } });
    assert.equal(await sh('tt', 'cat /n'), '2\n');
    // A query that started before a reset rebases over it or conflicts, as with any commit.
    const w = await ctx.exec('echo 3 > /other');
    assert.equal(w.committed, true);
    assert.equal((await t.http('POST', '/v1/contexts/tt/reset', { body: { version: 'v_nope' } })).status, 404);
  });
});
