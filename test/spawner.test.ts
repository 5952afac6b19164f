import assert from 'node:assert/strict';
import { test } from 'node:test';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { constants, tmpdir } from 'node:os';
import path from 'node:path';
import { Spawner, SpawnerRequestError, StartError } from '../packages/server/src/util/spawner.ts';
import { SBX_SPAWNER } from '../packages/server/src/util/native.ts';
import { run } from '../packages/server/src/util/proc.ts';

test('spawner: a discarded stream stops reaching the server; the other stream and the exit still do', async () => {
  const spawner = new Spawner();
  try {
    let before = 0;
    let after = 0;
    let stderr = '';
    let discarded = false;
    const s = spawner.start(['sh', '-c', 'head -c 64M /dev/zero; echo done >&2'], undefined, {
      onStdout: (c) => {
        if (discarded) { after += c.length; return; }
        before += c.length;
        if (before >= 1 << 20) { discarded = true; s.discard(1); }
      },
      onStderr: (c) => { stderr += c.toString(); },
    });
    const exit = await s.exited;
    assert.deepEqual(exit, { code: 0, signal: null });
    assert.equal(stderr, 'done\n', 'the writer ran to its end');
    // What was already in the pipe and in flight when the discard arrived; the rest of the 64 MiB never crossed.
    assert.ok(after < 4 << 20, `${after} bytes arrived after the discard`);
  } finally {
    spawner.close();
  }
});

// The frames the guest agent serves (native/procs.c, start.c), through the local spawner: the same code.
const collect = () => {
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  return { text: () => Buffer.concat(out).toString(), errText: () => Buffer.concat(err).toString(), h: { onStdout: (c: Buffer) => { out.push(Buffer.from(c)); }, onStderr: (c: Buffer) => { err.push(Buffer.from(c)); } } };
};

test('spawner: starts with options (user, cwd, environment, label); failures say where', async () => {
  const spawner = new Spawner();
  try {
    const c = collect();
    const p = spawner.startWith({ argv: ['sh', '-c', 'echo "$FOO $HOME $USER $(pwd) $(id -un)"; echo e >&2'], user: 'nobody', cwd: '/tmp', env: { FOO: 'bar' }, label: Buffer.from('L') }, c.h);
    assert.ok(await p.pid > 0);
    assert.deepEqual(await p.exited, { code: 0, signal: null });
    assert.equal(c.text(), 'bar /nonexistent nobody /tmp nobody\n');
    assert.equal(c.errText(), 'e\n');
    const stages = async (opts: Parameters<Spawner['startWith']>[0]) => (await spawner.startWith(opts, collect().h).pid.then(() => null, (e: unknown) => e)) as StartError;
    assert.deepEqual([(await stages({ argv: ['true'], user: 'no-such-user' })).stage, (await stages({ argv: ['true'], user: 'no-such-user' })).errno], ['user', constants.errno.ENOENT]);
    assert.equal((await stages({ argv: ['true'], cwd: '/no/such/dir' })).stage, 'cwd');
    assert.equal((await stages({ argv: ['no-such-program'] })).stage, 'exec');
  } finally {
    spawner.close();
  }
});

test('spawner: a stdin pipe fed in pieces and closed; attach, detach, signal and list', async () => {
  const spawner = new Spawner();
  try {
    const c = collect();
    const cat = spawner.startWith({ argv: ['cat'], stdin: true, label: Buffer.from('cat') }, c.h);
    const pid = await cat.pid;
    await spawner.input(pid, Buffer.from('hello '));
    await spawner.input(pid, Buffer.alloc(3 << 20, 'x'));
    await spawner.closeStdin(pid);
    assert.deepEqual(await cat.exited, { code: 0, signal: null });
    assert.equal(c.text().length, 6 + (3 << 20));
    await assert.rejects(spawner.input(pid, Buffer.from('gone')), (e: SpawnerRequestError) => e.errno === constants.errno.ESRCH);
    const noStdin = spawner.startWith({ argv: ['sleep', '5'] }, collect().h);
    await assert.rejects(spawner.input(await noStdin.pid, Buffer.from('x')), (e: SpawnerRequestError) => e.errno === constants.errno.EPIPE);
    noStdin.kill();
    await noStdin.exited;

    const first = collect();
    const ticker = spawner.startWith({ argv: ['sh', '-c', 'while true; do echo tick; sleep 0.05; done'], label: Buffer.from('ticker') }, first.h);
    const tpid = await ticker.pid;
    const unlabelled = spawner.startWith({ argv: ['sleep', '5'] }, collect().h);
    await unlabelled.pid;
    assert.deepEqual((await spawner.list()).map((x) => [x.pid, x.label.toString()]), [[tpid, 'ticker']]);
    const second = collect();
    const again = spawner.attach(tpid, second.h);
    assert.equal(await again.pid, tpid);
    ticker.detach();
    assert.deepEqual(await ticker.exited, { code: null, signal: null, detached: true });
    const seen = first.text().length;
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(first.text().length, seen, 'a detached id receives nothing');
    assert.match(second.text(), /tick/);
    await spawner.signal(tpid, constants.signals.SIGTERM);
    assert.deepEqual(await again.exited, { code: null, signal: 'SIGTERM' });
    await assert.rejects(spawner.attach(tpid, collect().h).pid, (e: StartError) => e.errno === constants.errno.ESRCH);
    unlabelled.kill();
    await unlabelled.exited;
  } finally {
    spawner.close();
  }
});

test('spawner: a PTY with its size, resized, its output on stdout', async () => {
  const spawner = new Spawner();
  try {
    const c = collect();
    const p = spawner.startWith({ argv: ['sh', '-c', 'stty size; tty; read line; stty size; echo "got $line"'], pty: { cols: 90, rows: 30 } }, c.h);
    const pid = await p.pid;
    for (let i = 0; i < 100 && !c.text().includes('/dev/pts/'); i++) await new Promise((r) => setTimeout(r, 20));
    await spawner.resize(pid, 120, 40);
    await spawner.input(pid, Buffer.from('hi\n'));
    assert.deepEqual(await p.exited, { code: 0, signal: null });
    assert.match(c.text(), /^30 90\r\n\/dev\/pts\/\d+\r\n(hi\r\n)?40 120\r\ngot hi\r\n$/);
    await assert.rejects(spawner.closeStdin(pid), (e: SpawnerRequestError) => e.errno === constants.errno.ESRCH);
  } finally {
    spawner.close();
  }
});

test('sbx-spawner --fs: entries (symlinks as envd describes them), errors by errno, writes from stdin with metadata, relative paths from the working directory', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'fsops-'));
  const fs = (args: string[], input?: string) => run(SBX_SPAWNER, ['--fs', ...args], input === undefined ? {} : { input });
  try {
    writeFileSync(path.join(dir, 'a.txt'), 'alpha');
    symlinkSync('a.txt', path.join(dir, 'link'));
    const fields = (b: Buffer) => b.toString().split('\0');
    const a = fields((await fs(['stat', `${dir}/./sub/../a.txt`])).stdout);
    assert.deepEqual([a[0], a[1], a[2], a[3], a[8], a[9]], ['f', '5', '420', '-rw-r--r--', `${dir}/a.txt`, '']);
    // A symlink: its target's kind and mode, its own permissions, the resolved target.
    const link = fields((await fs(['stat', `${dir}/link`])).stdout);
    assert.deepEqual([link[0], link[2], link[3].slice(0, 1), link[8], link[9]], ['f', '420', 'L', `${dir}/link`, `${dir}/a.txt`]);
    symlinkSync('nowhere', path.join(dir, 'dangling'));
    const dangling = fields((await fs(['stat', `${dir}/dangling`])).stdout);
    assert.deepEqual([dangling[0], dangling[2], dangling[9]], ['o', '0', `${dir}/dangling`]);
    rmSync(path.join(dir, 'dangling'));
    const made = await fs(['mkdir', `${dir}/d/e`]);
    assert.equal(fields(made.stdout)[0], 'd');
    const again = await fs(['mkdir', `${dir}/d/e`]);
    assert.deepEqual([again.code, again.stderr.split('\n')[0]], [1, `E${constants.errno.EEXIST}`]);
    const listed = fields((await fs(['list', dir, '2'])).stdout).filter((_, i) => i % 11 === 8);
    assert.deepEqual(listed, [`${dir}/a.txt`, `${dir}/d`, `${dir}/d/e`, `${dir}/link`]);
    assert.equal(fields((await fs(['write', `${dir}/new/dir/f.txt`], 'written')).stdout)[1], '7');
    assert.equal(readFileSync(`${dir}/new/dir/f.txt`, 'utf8'), 'written');
    assert.equal((await fs(['read', `${dir}/new/dir/f.txt`])).stdout.toString(), 'written');
    // Metadata: user.e2b.* xattrs, KEY US VALUE pairs separated by RS; a write replaces them.
    assert.equal(fields((await fs(['write', `${dir}/new/m.txt`, 'author', 'mish', 'purpose', 'upload'], 'm')).stdout)[10].split('\x1e').sort().join('\x1e'), 'author\x1fmish\x1epurpose\x1fupload');
    assert.equal(fields((await fs(['stat', `${dir}/new/m.txt`])).stdout)[10].split('\x1e').length, 2);
    assert.equal(fields((await fs(['write', `${dir}/new/m.txt`], 'again')).stdout)[10], '');
    assert.equal(fields((await fs(['move', `${dir}/a.txt`, `${dir}/x/y/b.txt`])).stdout)[8], `${dir}/x/y/b.txt`);
    assert.equal((await fs(['remove', `${dir}/new`])).code, 0);
    assert.equal(existsSync(`${dir}/new`), false);
    assert.equal((await fs(['remove', `${dir}/never-was`])).code, 0, 'removing what is not there');
    for (const [args, errno] of [[['read', `${dir}/d`], 'EISDIR'], [['read', `${dir}/nope`], 'ENOENT'], [['list', `${dir}/x/y/b.txt`], 'ENOTDIR']] as const) {
      const r = await fs([...args]);
      assert.deepEqual([r.code, r.stderr.split('\n')[0]], [1, `E${constants.errno[errno]}`], args.join(' '));
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('sbx-spawner --fs -u USER (as root): missing directories made and given to USER, the rest with USER\'s permissions', { skip: process.getuid?.() !== 0 && 'needs root' }, async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'fsops-u-'));
  chmodSync(dir, 0o755);
  const fs = (args: string[], input?: string) => run(SBX_SPAWNER, ['--fs', '-u', 'nobody', ...args], input === undefined ? {} : { input });
  const nobody = Number((await run('id', ['-u', 'nobody'])).stdout.toString());
  try {
    const w = await fs(['write', `${dir}/made/for/n.txt`], 'n');
    assert.equal(w.code, 0, w.stderr);
    for (const p of ['made', 'made/for', 'made/for/n.txt']) assert.equal(statSync(`${dir}/${p}`).uid, nobody, p);
    assert.equal((await fs(['mkdir', `${dir}/also/made`])).code, 0);
    assert.equal(statSync(`${dir}/also`).uid, nobody);
    assert.equal((await fs(['move', `${dir}/made/for/n.txt`, `${dir}/moved/n.txt`])).code, 0);
    assert.equal(statSync(`${dir}/moved`).uid, nobody);
    // What exists keeps its permissions: a file straight in root's directory is refused.
    const refused = await fs(['write', `${dir}/n.txt`], 'n');
    assert.deepEqual([refused.code, refused.stderr.split('\n')[0]], [1, `E${constants.errno.EACCES}`]);
    const unknown = await run(SBX_SPAWNER, ['--fs', '-u', 'no-such-user', 'stat', dir]);
    assert.equal(unknown.code, 3);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('sbx-spawner --watch -e: the entry of what a create, write or chmod names, none for a remove', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'watch-e-'));
  const spawner = new Spawner();
  try {
    let out = '';
    const w = spawner.start([SBX_SPAWNER, '--watch', '-e', dir], undefined, { onStdout: (c) => { out += c.toString(); }, onStderr: () => undefined });
    for (let i = 0; i < 200 && !out.startsWith('S\0'); i++) await new Promise((r) => setTimeout(r, 10));
    mkdirSync(`${dir}/sub`);
    for (let i = 0; i < 200 && out.split('\0').length < 16; i++) await new Promise((r) => setTimeout(r, 10));
    rmSync(`${dir}/sub`, { recursive: true });
    for (let i = 0; i < 200 && !out.endsWith('r\0sub\0-\0'); i++) await new Promise((r) => setTimeout(r, 10));
    const f = out.split('\0');
    assert.deepEqual([f[0], f[1], f[2], f[3], f[4], f[12]], ['S', 'c', 'sub', 'e', 'd', `${dir}/sub`]);
    assert.ok(out.endsWith('r\0sub\0-\0'), JSON.stringify(out));
    w.kill();
    await w.exited;
  } finally {
    spawner.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('sbx-spawner --watch: ready, then create, write, rename, remove, recursively', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'watch-'));
  const spawner = new Spawner();
  try {
    let out = '';
    const w = spawner.start([SBX_SPAWNER, '--watch', '-r', dir], undefined, { onStdout: (c) => { out += c.toString(); }, onStderr: () => undefined });
    for (let i = 0; i < 200 && !out.startsWith('S\0'); i++) await new Promise((r) => setTimeout(r, 10));
    mkdirSync(`${dir}/sub`);
    await new Promise((r) => setTimeout(r, 100));
    writeFileSync(`${dir}/sub/f`, 'x');
    renameSync(`${dir}/sub/f`, `${dir}/g`);
    rmSync(`${dir}/g`);
    const want = 'S\0c\0sub\0c\0sub/f\0w\0sub/f\0n\0sub/f\0c\0g\0r\0g\0';
    for (let i = 0; i < 200 && out !== want; i++) await new Promise((r) => setTimeout(r, 10));
    assert.equal(out, want);
    w.kill();
    await w.exited;
    const missing = await run(SBX_SPAWNER, ['--watch', `${dir}/nope`]);
    assert.deepEqual([missing.code, missing.stderr.split('\n')[0]], [1, `E${constants.errno.ENOENT}`]);
  } finally {
    spawner.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
