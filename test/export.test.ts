import assert from 'node:assert/strict';
import { execFile, execFileSync, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, test } from 'node:test';
import Database from 'better-sqlite3';
import { Shellbase } from '@shellbase/sdk';
import { startTestServer, type TestServer } from './harness.ts';

const run = promisify(execFile);

/** Export and import of contexts between two real servers (btrfs, bwrap). */
describe('context export and import', () => {
  let a: TestServer;
  let b: TestServer;
  const dir = mkdtempSync(path.join(tmpdir(), 'shellbase-export-'));
  const ids: Record<string, string> = {};

  before(async () => {
    [a, b] = await Promise.all([startTestServer(), startTestServer()]);
    const src = a.sb.context('src');
    ids.v1 = (await src.files.write('/root/a.txt', 'one\n')).version;
    await src.fork('side');
    await a.sb.context('side').files.write('/root/side.txt', 'side\n');
    ids.v2 = (await src.exec('echo two > /root/b.txt && mkdir -p /root/d && ln -s ../a.txt /root/d/link && chmod 600 /root/b.txt')).version;
    ids.merge = (await a.http('POST', '/v1/contexts/src/merge', { body: { from: 'side' } })).json.version;
    ids.head = (await src.files.write('/root/a.txt', 'three\n')).version;
  });
  after(async () => {
    await Promise.all([a?.close(), b?.close()]);
    rmSync(dir, { recursive: true, force: true });
  });

  /** The archive of a context of `t`, as bytes. */
  async function exported(t: TestServer, ctx: string, opts: { version?: string; history?: boolean } = {}): Promise<Buffer> {
    const body = await t.sb.contexts.export(ctx, opts);
    const parts: Uint8Array[] = [];
    for await (const c of body as unknown as AsyncIterable<Uint8Array>) parts.push(c);
    return Buffer.concat(parts);
  }
  const importRaw = (t: TestServer, archive: Buffer, as?: string, key = t.key) =>
    fetch(`${t.server.url}/v1/contexts/import${as ? `?as=${as}` : ''}`, {
      method: 'POST', body: archive, headers: { authorization: `Bearer ${key}`, 'content-type': 'application/octet-stream' },
    }).then(async (r) => ({ status: r.status, json: await r.json() as any }));

  /** A digest of the files (names, types, modes, sizes, link targets, contents) of a version. */
  const filesHash = async (sb: Shellbase, ctx: string, version?: string) => (await sb.context(ctx).exec(
    "cd / && { find root etc usr/bin -xdev -printf '%p %y %m %s %l\\n' | sort; find root etc -xdev -type f -print0 | sort -z | xargs -0 sha256sum; } | sha256sum",
    { commit: 'never', ...(version ? { version } : {}) })).stdout;

  /** Rows and layer trees of a server (what a refused import must leave as it was). */
  function stored(t: TestServer) {
    const db = new Database(path.join(t.home, 'meta.db'), { readonly: true });
    const rows = {
      contexts: (db.prepare('SELECT name FROM contexts ORDER BY name').all() as { name: string }[]).map((r) => r.name),
      versions: (db.prepare('SELECT COUNT(*) AS n FROM versions').get() as { n: number }).n,
      layers: (db.prepare('SELECT COUNT(*) AS n FROM layers').get() as { n: number }).n,
    };
    db.close();
    return { ...rows, trees: readdirSync(path.join(t.home, 'store', 'layers')).sort() };
  }

  /** The archive's parts (tar), changed by `edit`, written again in their order. */
  function rewritten(archive: Buffer, edit: (files: string) => void): Buffer {
    const at = mkdtempSync(path.join(dir, 'x-'));
    writeFileSync(path.join(at, 'in.sbx'), archive);
    const names = execFileSync('tar', ['-tf', 'in.sbx'], { cwd: at, encoding: 'utf8' }).trim().split('\n');
    execFileSync('mkdir', ['parts'], { cwd: at });
    execFileSync('tar', ['-xf', '../in.sbx'], { cwd: path.join(at, 'parts') });
    edit(path.join(at, 'parts'));
    execFileSync('tar', ['--format=ustar', '-cf', '../out.sbx', ...names], { cwd: path.join(at, 'parts') });
    return readFileSync(path.join(at, 'out.sbx'));
  }
  const resum = (files: string) => {
    const sums = readFileSync(path.join(files, 'SHA256SUMS'), 'utf8').trim().split('\n').map((l) => {
      const name = l.slice(66);
      return `${createHash('sha256').update(readFileSync(path.join(files, name))).digest('hex')}  ${name}`;
    });
    writeFileSync(path.join(files, 'SHA256SUMS'), sums.join('\n') + '\n');
  };

  test('a layer larger than a piece goes in several pieces; an archive of format 1 (each layer one entry) still imports', async () => {
    const big = a.sb.context('big');
    await big.exec('head -c 20000000 /dev/urandom > /root/r && echo small > /root/s');
    const archive = await exported(a, 'big');
    const names = execFileSync('tar', ['-t'], { input: archive, encoding: 'utf8' }).trim().split('\n');
    const pieces = names.filter((n) => /\.zst\.\d{4}$/.test(n));
    assert.ok(pieces.length >= 3, `20 MB of random bytes in pieces of 8 MiB: ${names.join(' ')}`);
    assert.equal((await b.sb.contexts.import(archive, { as: 'big2' })).head, (await a.sb.contexts.get('big')).head);
    assert.equal(await filesHash(b.sb, 'big2'), await filesHash(a.sb, 'big'));
    // The same archive in format 1: each layer's pieces joined into one entry.
    const at = mkdtempSync(path.join(dir, 'f1-'));
    execFileSync('tar', ['-x'], { input: archive, cwd: at });
    const m = JSON.parse(readFileSync(path.join(at, 'manifest.json'), 'utf8'));
    writeFileSync(path.join(at, 'manifest.json'), JSON.stringify({ ...m, format: 1 }));
    const entries = ['manifest.json'];
    for (const l of m.layers as { id: string }[]) {
      const mine = pieces.filter((p) => p.startsWith(`layers/${l.id}.zst.`)).sort();
      writeFileSync(path.join(at, 'layers', `${l.id}.zst`), Buffer.concat(mine.map((p) => readFileSync(path.join(at, p)))));
      entries.push(`layers/${l.id}.zst`);
    }
    writeFileSync(path.join(at, 'SHA256SUMS'), entries.map((e) => `${createHash('sha256').update(readFileSync(path.join(at, e))).digest('hex')}  ${e}`).join('\n') + '\n');
    const one = execFileSync('tar', ['--format=ustar', '-cf', '-', ...entries, 'SHA256SUMS'], { cwd: at, maxBuffer: 1 << 28 });
    assert.equal((await b.sb.contexts.import(one, { as: 'big1' })).head, (await a.sb.contexts.get('big')).head);
    assert.equal(await filesHash(b.sb, 'big1'), await filesHash(a.sb, 'big'));
  });

  test('a large layer goes from its packer straight into the connection (sbx-send): the same archive as through the server; a client gone stops it', async () => {
    const helper = async () => Number(/shellbase_export_layers_total\{by="helper"\} (\d+)/.exec((await a.http('GET', '/metrics', { key: null })).text)?.[1] ?? 0);
    const big = a.sb.context('big-direct');
    await big.exec('head -c 40000000 /dev/urandom > /root/r && seq 1 300000 > /root/s', { limits: { diskMb: 200 } });
    const before = await helper();
    const direct = await exported(a, 'big-direct');
    assert.equal(await helper(), before + 1, 'the one large layer was written by the helper');
    // HTTP/1.0 has no chunked encoding: the same archive goes through the server.
    const viaServer = (await run('curl', ['-sS', '--fail', '--http1.0', '-H', `Authorization: Bearer ${a.key}`, `${a.server.url}/v1/contexts/big-direct/export`], { maxBuffer: 1 << 26, encoding: 'buffer' })).stdout;
    assert.equal(await helper(), before + 1);
    const entries = (archive: Buffer) => {
      const at = mkdtempSync(path.join(dir, 'cmp-'));
      execFileSync('tar', ['-x'], { input: archive, cwd: at });
      const names = execFileSync('tar', ['-t'], { input: archive, encoding: 'utf8' }).trim().split('\n');
      const sums = readFileSync(path.join(at, 'SHA256SUMS'), 'utf8').split('\n').filter((l) => l && !l.endsWith('  manifest.json'));
      return [...names.filter((n) => n !== 'manifest.json' && n !== 'SHA256SUMS').map((n) => [n, createHash('sha256').update(readFileSync(path.join(at, n))).digest('hex')]), sums];
    };
    const [d, s] = [entries(direct), entries(viaServer)];
    assert.ok(d.filter(([n]) => /\.zst\.\d{4}$/.test(n!)).length >= 2, d.map(([n]) => n).join(' '));
    assert.equal(d.at(-1)!.length, d.length - 1, 'SHA256SUMS names every piece');
    // The pieces and their checksums are the same bytes either way (the manifests differ only in their time).
    assert.deepEqual(d, s);
    assert.equal((await b.sb.contexts.import(direct, { as: 'big-direct' })).head, (await a.sb.contexts.get('big-direct')).head);
    assert.equal(await filesHash(b.sb, 'big-direct'), await filesHash(a.sb, 'big-direct'));

    // A reader that goes away after the first bytes: the helper and its packer (tar, zstd) are
    // stopped, not left writing.
    const head = (await a.sb.contexts.get('big-direct')).head;
    const tree = path.join(a.home, 'store', 'layers', (await a.server.engine.deps.metadata.versions.get(head))!.layers.at(-1)!, 'tree');
    const abort = new AbortController();
    const r = await fetch(`${a.server.url}/v1/contexts/big-direct/export`, { headers: { authorization: `Bearer ${a.key}` }, signal: abort.signal });
    const running = (pattern: string) => spawnSync('pgrep', ['-f', '--', pattern], { encoding: 'utf8' }).stdout.trim();
    const sending = () => running(`sbx-send ${process.pid} `) + running(`--directory ${tree} `);
    try {
      await r.body!.getReader().read();
      assert.notEqual(running(`sbx-send ${process.pid} `), '', 'the helper waits for the reader');
      assert.notEqual(running(`--directory ${tree} `), '', 'so does its packer');
    } finally {
      abort.abort();
    }
    let left = '';
    for (let i = 0; i < 100; i++) {
      left = sending();
      if (!left) break;
      await new Promise((res) => setTimeout(res, 50));
    }
    assert.equal(left, '', 'no sbx-send, tar or zstd left');
    assert.equal((await a.http('GET', '/v1/contexts/big-direct')).status, 200, 'the server goes on');
  });

  test('--history: the other server has the same versions, heads and files', async () => {
    const archive = await exported(a, 'src', { history: true });
    const names = execFileSync('tar', ['-t'], { input: archive, encoding: 'utf8' }).trim().split('\n');
    assert.equal(names[0], 'manifest.json');
    assert.equal(names[names.length - 1], 'SHA256SUMS');
    assert.ok(names.slice(1, -1).every((n) => /^layers\/[A-Za-z0-9_]+\.zst\.\d{4}$/.test(n)), names.join(' '));
    const ctx = await b.sb.contexts.import(archive);
    assert.equal(ctx.name, 'src');
    assert.equal(ctx.head, ids.head);
    const there = await b.sb.context('src').versions();
    const here = await a.sb.context('src').versions();
    assert.deepEqual(there.map((v) => [v.id, v.parent, v.merged, v.cause.kind]), here.map((v) => [v.id, v.parent, v.merged, v.cause.kind]));
    assert.ok(there.some((v) => v.id === ids.merge && v.merged), 'the merge keeps its second parent');
    assert.equal(await filesHash(b.sb, 'src'), await filesHash(a.sb, 'src'));
    assert.equal(await filesHash(b.sb, 'src', ids.v2), await filesHash(a.sb, 'src', ids.v2));
    assert.equal((await b.sb.context('src').at(ids.v1).files.read('/root/a.txt')).toString(), 'one\n');
    // History works on the imported versions: a diff from their change sets.
    const diff = async (t: TestServer) => (await t.http('GET', `/v1/contexts/src/diff?from=${ids.v1}&to=${ids.v2}`)).json;
    const there2 = await diff(b);
    assert.ok(there2.changes.some((c: { path: string }) => c.path === '/root/b.txt'), JSON.stringify(there2));
    assert.deepEqual(there2, await diff(a));
  });

  test('the head alone, and --version, import with their ids and files; --as names the context', async () => {
    const head = await exported(a, 'src');
    const ctx = await b.sb.contexts.import(head, { as: 'head-only' });
    assert.deepEqual([ctx.name, ctx.head], ['head-only', ids.head]);
    assert.equal(await filesHash(b.sb, 'head-only'), await filesHash(a.sb, 'src'));
    const one = await exported(a, 'src', { version: ids.v1 });
    const old = await b.sb.contexts.import(one, { as: 'old' });
    assert.equal(old.head, ids.v1);
    assert.equal(await filesHash(b.sb, 'old'), await filesHash(a.sb, 'src', ids.v1));
  });

  test('into the server it came from, under another name: its versions and layers are reused', async () => {
    const before = stored(a);
    const ctx = await a.sb.contexts.import(await exported(a, 'src', { history: true }), { as: 'copy' });
    assert.equal(ctx.head, ids.head);
    const after = stored(a);
    assert.deepEqual([after.versions, after.layers, after.trees], [before.versions, before.layers, before.trees]);
    assert.equal(await filesHash(a.sb, 'copy'), await filesHash(a.sb, 'src'));
  });

  test('a tenant\'s own key imports into its tenant, unpacked confined: the same versions and files (deletions, opaque directories, owners, links)', async () => {
    const key = (await b.http('POST', '/v1/tenants', { body: { name: 'plain' } })).json.apiKey as string;
    const src = a.sb.context('tenant-src');
    await src.exec('rm /etc/motd && rm -rf /usr/share/doc && mkdir -p /usr/share/doc/only && echo x > /usr/share/doc/only/f'
      + ' && echo o > /root/owned && chown 1000:1000 /root/owned && ln /root/owned /root/hard && ln -s /etc/hostname /root/abs && chmod 4711 /root/owned');
    const archive = await exported(a, 'tenant-src', { history: true });
    const r = await importRaw(b, archive, 'mine', key);
    assert.equal(r.status, 201, JSON.stringify(r.json));
    assert.equal(r.json.head, (await a.sb.contexts.get('tenant-src')).head);
    const mine = new Shellbase({ url: b.server.url, apiKey: key });
    const list = "cd / && find root etc usr/share/doc -xdev -printf '%p %y %m %u:%g %s %l\\n' | sort | sha256sum; ls /usr/share/doc; test -e /etc/motd || echo no-motd; stat -c '%h' /root/owned";
    const there = (await mine.context('mine').exec(list, { commit: 'never' })).stdout;
    assert.equal(there, (await src.exec(list, { commit: 'never' })).stdout);
    assert.match(there, /^[0-9a-f]{64} {2}-\nonly\nno-motd\n2\n$/);
    assert.equal(await filesHash(mine, 'mine'), await filesHash(a.sb, 'tenant-src'));
    // Another tenant's export is not found.
    const other = (await a.http('POST', '/v1/tenants', { body: { name: 'other' } })).json.apiKey as string;
    assert.equal((await a.http('GET', '/v1/contexts/src/export', { key: other })).status, 404);
    assert.equal((await a.http('GET', '/v1/contexts/src/export/oci', { key: other })).status, 404);
  });

  test('a tenant\'s archive plants no device node, no file of the host\'s root and nothing outside its layer; a member leaving its root refuses it, nothing changed', async () => {
    const key = (await b.http('POST', '/v1/tenants', { body: { name: 'crafty' } })).json.apiKey as string;
    /** The archive of a context of `a` that `b` lacks. */
    const fresh = async (name: string) => {
      await a.sb.context(name).files.write('/root/c.txt', `${name}\n`);
      return exported(a, name);
    };
    let layer = '';
    /** The archive with its last layer's pack replaced by one holding `tar` (as the host's root packed it). */
    const planted = (archive: Buffer, tar: Buffer) => rewritten(archive, (files) => {
      const m = JSON.parse(readFileSync(path.join(files, 'manifest.json'), 'utf8'));
      layer = m.layers.at(-1).id as string;
      // It claims to be an image's layer (the digest pulls find stored layers by).
      m.layers.at(-1).digest = `sha256:${'a'.repeat(64)}`;
      writeFileSync(path.join(files, 'manifest.json'), JSON.stringify(m));
      const head = Buffer.from(JSON.stringify({ kind: 'shellbase.layer', format: 1 }));
      const frame = Buffer.alloc(8);
      frame.writeUInt32LE(0x184d2a50, 0);
      frame.writeUInt32LE(head.length, 4);
      const pieces = readdirSync(path.join(files, 'layers')).filter((n) => n.startsWith(`${layer}.zst.`)).sort();
      writeFileSync(path.join(files, 'layers', pieces[0]), Buffer.concat([frame, head, execFileSync('zstd', ['-q', '-c'], { input: tar })]));
      for (const p of pieces.slice(1)) writeFileSync(path.join(files, 'layers', p), '');
      resum(files);
    });
    const tree = mkdtempSync(path.join(dir, 'tree-'));
    execFileSync('mknod', [path.join(tree, 'null'), 'c', '1', '3']);
    writeFileSync(path.join(tree, 'suid'), '#!/bin/sh\n');
    execFileSync('chmod', ['4755', path.join(tree, 'suid')]);
    execFileSync('chown', ['0:0', path.join(tree, 'suid')]);
    execFileSync('setfattr', ['-n', 'trusted.evil', '-v', 'y', path.join(tree, 'suid')]);
    const r = await importRaw(b, planted(await fresh('craft-src'), execFileSync('tar', ['--format=posix', '--numeric-owner', '--xattrs', '--xattrs-include=*', '-cf', '-', '-C', tree, '.'])), 'planted', key);
    assert.equal(r.status, 201, JSON.stringify(r.json));
    const made = path.join(b.home, 'store', 'layers', layer, 'tree');
    const found = execFileSync('find', [made, '-printf', '%P %y %U %m\\n'], { encoding: 'utf8' });
    assert.doesNotMatch(found, /^null /m, `no device node: ${found}`);
    const suid = found.split('\n').find((l) => l.startsWith('suid '));
    assert.ok(suid && suid.split(' ')[2] !== '0', `not the host's root's: ${found}`);
    assert.doesNotMatch(spawnSync('getfattr', ['--absolute-names', '-d', '-m', '-', path.join(made, 'suid')], { encoding: 'utf8' }).stdout, /trusted/);
    const db = new Database(path.join(b.home, 'meta.db'), { readonly: true });
    const row = db.prepare('SELECT digest FROM layers WHERE id = ?').get(layer) as { digest: string | null } | undefined;
    db.close();
    assert.ok(row, 'the layer is recorded');
    assert.equal(row.digest ?? null, null, 'a tenant\'s archive does not give its layer a digest image pulls would find');
    // A member whose name leaves the layer's root (Python's tarfile writes it as given).
    const before = stored(b);
    const escaping = execFileSync('python3', ['-c', 'import io,sys,tarfile\nb=io.BytesIO()\nt=tarfile.open(fileobj=b,mode="w",format=tarfile.PAX_FORMAT)\ni=tarfile.TarInfo("../../escaped");i.size=1\nt.addfile(i,io.BytesIO(b"x"))\nt.close()\nsys.stdout.buffer.write(b.getvalue())']);
    const refused = await importRaw(b, planted(await fresh('craft-src2'), escaping), 'escaped', key);
    assert.equal(refused.status, 400, JSON.stringify(refused.json));
    assert.match(refused.json.error.message, /leaves its root/);
    assert.deepEqual(stored(b), before, 'nothing changed');
  });

  test('a tenant\'s import counts against its storedBytes quota as its layers unpack: over it, refused, nothing changed', async () => {
    const key = (await b.http('POST', '/v1/tenants', { body: { name: 'tight', quotas: { storedBytes: 200_000 } } })).json.apiKey as string;
    const big = a.sb.context('big-for-tight');
    await big.exec('head -c 400000 /dev/urandom > /root/r');
    const before = stored(b);
    const r = await importRaw(b, await exported(a, 'big-for-tight'), 'over', key);
    assert.equal(r.status, 429, JSON.stringify(r.json));
    assert.equal(r.json.error.code, 'limit_exceeded');
    assert.equal(r.json.error.details.quota, 'storedBytes');
    assert.deepEqual(stored(b), before, 'nothing changed');
  });

  test('a version id that exists with other content is refused, nothing changed', async () => {
    const archive = rewritten(await exported(a, 'src', { history: true }), (files) => {
      const m = JSON.parse(readFileSync(path.join(files, 'manifest.json'), 'utf8'));
      const v = m.versions.find((x: { id: string }) => x.id === ids.v2);
      v.layers = v.layers.slice(0, -1);
      writeFileSync(path.join(files, 'manifest.json'), JSON.stringify(m));
      resum(files);
    });
    const before = stored(a);
    const r = await importRaw(a, archive, 'clash');
    assert.equal(r.status, 409, JSON.stringify(r.json));
    assert.equal(r.json.error.code, 'conflict');
    assert.equal(r.json.error.details.version, ids.v2);
    assert.deepEqual(stored(a), before);
  });

  describe('bad archives are refused with nothing changed', () => {
    // Of a context whose layers the importing server lacks: a refused import has layers to undo.
    let archive: Buffer;
    before(async () => {
      const fresh = a.sb.context('fresh');
      await fresh.files.write('/root/x', 'x\n');
      await fresh.exec('head -c 300000 /dev/urandom > /root/big && echo y > /root/y');
      archive = await exported(a, 'fresh', { history: true });
    });

    const refused = async (bytes: Buffer, status: number, code: string, message: RegExp) => {
      const before = stored(b);
      const r = await importRaw(b, bytes, 'bad');
      assert.equal(r.status, status, JSON.stringify(r.json));
      assert.equal(r.json.error.code, code);
      assert.match(r.json.error.message, message);
      assert.deepEqual(stored(b), before);
    };

    test('of a newer format', async () => {
      await refused(rewritten(archive, (files) => {
        const m = JSON.parse(readFileSync(path.join(files, 'manifest.json'), 'utf8'));
        writeFileSync(path.join(files, 'manifest.json'), JSON.stringify({ ...m, format: 99 }));
        resum(files);
      }), 412, 'failed_precondition', /format 99; this server reads formats 1 and 2/);
    });

    test('cut short, in a layer and before its checksums', async () => {
      await refused(archive.subarray(0, Math.floor(archive.length * 0.6)), 400, 'invalid_argument', /damaged|cut short|ends in the middle/);
      await refused(archive.subarray(0, archive.length - 2048), 400, 'invalid_argument', /SHA256SUMS/);
    });

    test('whose checksums lie about a layer', async () => {
      await refused(rewritten(archive, (files) => {
        const sums = readFileSync(path.join(files, 'SHA256SUMS'), 'utf8').split('\n');
        const i = sums.findIndex((l) => l.includes('layers/'));
        sums[i] = (sums[i][0] === '0' ? '1' : '0') + sums[i].slice(1);
        writeFileSync(path.join(files, 'SHA256SUMS'), sums.join('\n'));
      }), 400, 'invalid_argument', /layers\/.*does not match its sha256/);
    });

    test('over an existing context name', async () => {
      const before = stored(b);
      const r = await importRaw(b, await exported(a, 'src'));
      assert.equal(r.status, 409, JSON.stringify(r.json));
      assert.equal(r.json.error.code, 'already_exists');
      assert.deepEqual(stored(b), before);
    });

    test('that is no archive at all, or not a context archive', async () => {
      await refused(Buffer.from('not a tar at all'.repeat(100)), 400, 'invalid_argument', /tar/);
      await refused(rewritten(archive, (files) => {
        writeFileSync(path.join(files, 'manifest.json'), '{"kind":"something else"}');
      }), 400, 'invalid_argument', /not a context archive/);
    });
  });
});
