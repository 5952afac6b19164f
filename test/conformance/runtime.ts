import assert from 'node:assert/strict';
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { Readable } from 'node:stream';
import { tar } from '../../packages/sdk/src/tar.ts';
import type { ArchiveUnpacking, SandboxRuntime, SandboxSpec } from '../../packages/server/src/runtime/types.ts';
import type { Snapshotter } from '../../packages/server/src/store/snapshotter/types.ts';

export interface RuntimeFixture {
  /** Every runtime has sandboxes and tar unpacking (HostPrograms, the bwrap runtime's, have their own suite: host-programs.ts). */
  runtime: SandboxRuntime & ArchiveUnpacking;
  /** The snapshotter whose mounts the runtime performs. */
  snapshotter: Snapshotter;
  /** An image layer to run over, and a file it holds (a path inside, and relative for its reader). */
  image: string;
  imageFile: string;
  done(): Promise<void>;
}

const LIMITS = { memoryMb: 256, pids: 64, cpus: 1, outputBytes: 1 << 20, timeoutMs: 10_000 };

/**
 * The cases every Runtime backend must pass, with the snapshotter it pairs
 * with. Commands use only what the in-memory runtime's shell language has
 * (runtime/memory/script.ts), which real shells understand alike.
 */
export function runtimeConformance(name: string, make: () => Promise<RuntimeFixture>) {
  const withRuntime = (title: string, fn: (f: RuntimeFixture, run: (command: string, extra?: Partial<SandboxSpec>) => Promise<{ r: Awaited<ReturnType<SandboxRuntime['run']>>; layer: Awaited<ReturnType<Snapshotter['commit']>> }>) => Promise<void>) =>
    test(`${name}: ${title}`, async () => {
      const f = await make();
      const run = async (command: string, extra: Partial<SandboxSpec> = {}) => {
        const scratch = await f.snapshotter.prepare({ diskMb: 64 });
        const r = await f.runtime.run({ mount: await f.snapshotter.mounts([f.image], scratch), argv: ['bash', '-c', command], env: {}, cwd: '/root', limits: LIMITS, ...extra });
        return { r, layer: await f.snapshotter.commit(scratch) };
      };
      try { await fn(f, run); } finally { await f.done(); }
    });

  withRuntime('exit codes, stdout and stderr come back apart', async (_f, run) => {
    const { r, layer } = await run('echo out; echo err >&2; exit 3');
    assert.deepEqual([r.exitCode, r.stdout, r.stderr, r.timedOut, r.aborted, r.truncated], [3, 'out\n', 'err\n', false, false, false]);
    assert.equal(layer, null, 'nothing written, no layer');
  });

  withRuntime('the mount shows the image; writes and deletions become the scratch\'s layer', async (f, run) => {
    const expected = (await f.snapshotter.reader(f.image)).readAll(f.imageFile.slice(1)).toString();
    const { r, layer } = await run(`cat ${f.imageFile} && echo hi > /root/new && mkdir -p /root/d/e && rm ${f.imageFile}`);
    assert.equal(r.exitCode, 0, r.stderr);
    assert.equal(r.stdout, expected);
    assert.ok(layer);
    const paths = new Map(layer.changes);
    assert.equal(paths.get('/root/new'), 'f');
    assert.equal(paths.get('/root/d/e'), 'd');
    assert.equal(paths.get(f.imageFile), 'w', 'a deleted image file is a whiteout');
    assert.equal((await f.snapshotter.reader(layer.layerId)).readAll('root/new').toString(), 'hi\n');
  });

  withRuntime('overlays show their files above the layers and are never among the writes', async (f, run) => {
    const dir = mkdtempSync(path.join(tmpdir(), 'shellbase-overlay-'));
    chmodSync(dir, 0o755); // reached by the sandboxes' root
    try {
      mkdirSync(path.join(dir, 'etc/ssl'), { recursive: true });
      writeFileSync(path.join(dir, 'etc/ssl/extra.pem'), 'from the overlay\n');
      writeFileSync(path.join(dir, f.imageFile), 'the overlay\'s copy\n');
      const { r, layer } = await run(`cat /etc/ssl/extra.pem && cat ${f.imageFile} && echo mine > /root/mine`, { overlays: [dir] });
      assert.equal(r.exitCode, 0, r.stderr);
      assert.equal(r.stdout, 'from the overlay\nthe overlay\'s copy\n', 'the overlay is above the image');
      assert.ok(layer?.changes.some(([p, type]) => p === '/root/mine' && type === 'f'), 'the command\'s own write is a change');
      assert.deepEqual(layer.changes.filter(([p]) => p.startsWith('/etc')), [], 'nothing of the overlay is');
      const { r: without } = await run('cat /etc/ssl/extra.pem');
      assert.notEqual(without.exitCode, 0, 'absent without the overlay');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  withRuntime('volumes: other layer stacks at their targets, read-only or writing into their own scratch; no mount point is a write', async (f, run) => {
    const expected = (await f.snapshotter.reader(f.image)).readAll(f.imageFile.slice(1)).toString();
    const own = await f.snapshotter.prepare({ diskMb: 64 });
    try {
      const rw = await f.snapshotter.mounts([f.image], own);
      const ro = await f.snapshotter.mounts([f.image], own);
      const { r, layer } = await run(`cat /mnt/ro${f.imageFile} && echo no > /mnt/ro/root/x || echo refused; echo v > /data/vol/root/v && echo mine > /root/mine`, {
        volumes: [{ target: '/mnt/ro', mount: ro, readOnly: true }, { target: '/data/vol', mount: rw, readOnly: false }],
      });
      assert.equal(r.exitCode, 0, r.stderr);
      assert.equal(r.stdout, `${expected}refused\n`, 'the read-only stack shows its files and takes no write');
      assert.deepEqual(layer?.changes, [['/root', 'd'], ['/root/mine', 'f']], 'only the command\'s own write: no mount point, nothing of a volume');
      const vol = await f.snapshotter.commit(own);
      assert.deepEqual(vol?.changes, [['/root', 'd'], ['/root/v', 'f']], 'the writable volume\'s writes are its scratch\'s');
    } catch (e) {
      await f.snapshotter.discard(own).catch(() => undefined);
      throw e;
    }
  });

  withRuntime('unpackTar: a tar stream\'s files, directories and links land in the scratch, owned as a sandbox sees them', async (f) => {
    const scratch = await f.snapshotter.prepare({ diskMb: 64 });
    const body = tar([
      { path: 'srv', type: 'dir', mode: 0o755 },
      { path: 'srv/app.py', data: 'print(1)\n', mode: 0o640, uid: 1000, gid: 1000 },
      { path: 'srv/latest', type: 'symlink', linkname: 'app.py' },
    ]);
    await f.runtime.unpackTar(Readable.from([body]), f.snapshotter.writer(scratch).tree());
    const layer = await f.snapshotter.commitImport(scratch);
    const r = await f.snapshotter.reader(layer.layerId);
    assert.equal(r.readAll('srv/app.py').toString(), 'print(1)\n');
    assert.equal(r.readlink('srv/latest'), 'app.py');
    const st = r.stat('srv/app.py')!;
    assert.deepEqual([st.kind, st.mode, st.uid, st.gid], ['file', 0o640, 101_000, 101_000], 'uid 1000 inside is 101000 on the host');
  });

  withRuntime('stdin reaches the command; output streams to onOutput', async (_f, run) => {
    const seen: string[] = [];
    const { r } = await run('cat', { stdin: 'from stdin\n', onOutput: (s, d) => seen.push(`${s}:${d}`) });
    assert.equal(r.stdout, 'from stdin\n');
    assert.equal(seen.join(''), 'stdout:from stdin\n');
  });

  withRuntime('output past the cap is cut and says so', async (_f, run) => {
    const { r } = await run('echo 0123456789abcdef', { limits: { ...LIMITS, outputBytes: 8 } });
    assert.equal(r.stdout, '01234567');
    assert.equal(r.truncated, true);
  });

  withRuntime('a timeout kills the command: SIGKILL, exit 137', async (_f, run) => {
    const { r } = await run('sleep 5', { limits: { ...LIMITS, timeoutMs: 300 } });
    assert.deepEqual([r.timedOut, r.exitCode, r.signal], [true, 137, 'SIGKILL']);
    assert.ok(r.wallMs < 4000, `killed in time (${r.wallMs} ms)`);
  });

  withRuntime('an abort kills the command', async (_f, run) => {
    const abort = new AbortController();
    setTimeout(() => abort.abort(), 200);
    const { r } = await run('sleep 5', { signal: abort.signal });
    assert.deepEqual([r.aborted, r.exitCode], [true, 137]);
  });

  withRuntime('a command that does not exist exits 127', async (_f, run) => {
    const { r } = await run('no-such-command-here');
    assert.equal(r.exitCode, 127);
  });
}
