import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { imageInfo, imageRootfs, loadConfig } from '../../packages/server/src/index.ts';
import { BwrapRuntime, cgroupDriver } from '../../packages/server/src/runtime/index.ts';
import { BtrfsSnapshotter } from '../../packages/server/src/store/snapshotter/btrfs/btrfs-snapshotter.ts';
import { runtimeConformance, type RuntimeFixture } from './runtime.ts';
import { Dialer } from '../../packages/server/src/util/dialer.ts';

/** The bwrap runtime with its warm pool: every case of the suite, on sandboxes made ahead where one is ready. `min`: the pool's idle size. */
async function fixture(min?: number): Promise<RuntimeFixture & { runtime: BwrapRuntime; dir: string }> {
  const dir = mkdtempSync(path.join(tmpdir(), 'shellbase-warm-runtime-'));
  chmodSync(dir, 0o711); // passable by the sandboxes' root, as a server's home is
  const cache = loadConfig().cache;
  const dialer = new Dialer(path.join(dir, 'streams'));
  const snapshotter = new BtrfsSnapshotter({
    root: path.join(dir, 'store'), imageFile: path.join(dir, 'store.btrfs'), sizeGb: 2, imagePath: (id) => imageRootfs(cache, id),
    defaultDiskMb: 64, poolSize: 0, rootId: 100_000, dialer,
  });
  await snapshotter.open();
  const runtime = new BwrapRuntime(cgroupDriver(`warm${process.pid}`), { dialer, helpers: path.join(dir, 'helpers'), warm: { dir: path.join(dir, 'warm'), min } });
  await runtime.start();
  return {
    runtime, snapshotter, dir, image: imageInfo(cache, 'debian').layerId, imageFile: '/etc/debian_version',
    done: async () => { await runtime.close(); await snapshotter.close(); rmSync(dir, { recursive: true, force: true }); },
  };
}

runtimeConformance('bwrap runtime, warm', () => fixture());

const LIMITS = { memoryMb: 256, pids: 64, cpus: 1, outputBytes: 1 << 20, timeoutMs: 10_000 };

test('bwrap runtime, warm: a member that dies as it is taken never runs the command; the sandbox starts cold instead', async () => {
  // One member when idle: the one ready after the first query is the one made once it ended.
  const f = await fixture(1);
  try {
    const run = async (command: string, before?: () => void) => {
      const scratch = await f.snapshotter.prepare({ diskMb: 64 });
      before?.();
      const r = await f.runtime.run({ mount: await f.snapshotter.mounts([f.image], scratch), argv: ['bash', '-c', command], env: {}, cwd: '/root', limits: LIMITS });
      await f.snapshotter.release(scratch);
      return r;
    };
    const which = `tr '\\0' ' ' < /proc/1/cmdline`;
    assert.match((await run(which)).stdout, /\/sbx warm /, 'the first query ran warm');
    // The pool's next member (made once that query ended): kill its sandbox, then take it at once.
    let inner = '';
    for (let i = 0; i < 250 && !inner; i++) {
      await new Promise((r) => setTimeout(r, 20));
      const ps = execFileSync('ps', ['-eo', 'pid=,ppid=,args='], { encoding: 'utf8' }).split('\n').filter((l) => l.includes(`--connect ${f.dir}/warm/`));
      const pids = new Set(ps.map((l) => l.trim().split(/\s+/)[0]));
      inner = ps.map((l) => l.trim().split(/\s+/)).find(([, ppid]) => pids.has(ppid))?.[0] ?? '';
    }
    assert.ok(inner, 'a member is ready');
    // Killed right before the take, in the same tick: the pool cannot have seen it end.
    const r = await run(`${which}; echo ran`, () => process.kill(Number(inner), 'SIGKILL'));
    assert.equal(r.exitCode, 0, r.stderr);
    assert.match(r.stdout, /^bwrap .* ran\n$/s, 'it ran once, cold');
    assert.equal(r.stderr, '');
  } finally {
    await f.done();
  }
});

test('bwrap runtime: a volume whose path runs through a symlink of the sandbox\'s tree is refused, warm and cold; nothing is mounted where it leads', async () => {
  const f = await fixture(1);
  try {
    const scratch = await f.snapshotter.prepare({ diskMb: 64 });
    const made = await f.runtime.run({ mount: await f.snapshotter.mounts([f.image], scratch), argv: ['bash', '-c', 'mkdir -p /root/real && ln -s /root/real /root/link && ln -s /etc /root/etc'], env: {}, cwd: '/root', limits: LIMITS });
    assert.equal(made.exitCode, 0, made.stderr);
    const layer = (await f.snapshotter.commit(scratch))!;
    for (const stdin of [undefined, 'cold']) {
      for (const target of ['/root/link/v', '/root/etc/v']) {
        const own = await f.snapshotter.prepare({ diskMb: 64 });
        const vol = await f.snapshotter.prepare({ diskMb: 64 });
        try {
          await assert.rejects(f.runtime.run({
            mount: await f.snapshotter.mounts([f.image, layer.layerId], own), argv: ['bash', '-c', 'true'], env: {}, cwd: '/root', limits: LIMITS, stdin,
            volumes: [{ target, readOnly: false, mount: await f.snapshotter.mounts([f.image], vol) }],
          }), /sandbox set-up failed: .*(symbolic links|root\/(link|etc)\/v)/, `${target}${stdin ? ' (cold)' : ''}`);
        } finally {
          await f.snapshotter.discard(own);
          await f.snapshotter.discard(vol);
        }
      }
    }
    // Through a plain directory it mounts.
    const own = await f.snapshotter.prepare({ diskMb: 64 });
    const vol = await f.snapshotter.prepare({ diskMb: 64 });
    const ok = await f.runtime.run({
      mount: await f.snapshotter.mounts([f.image, layer.layerId], own), argv: ['bash', '-c', 'cat /root/real/v/etc/debian_version'], env: {}, cwd: '/root', limits: LIMITS,
      volumes: [{ target: '/root/real/v', readOnly: true, mount: await f.snapshotter.mounts([f.image], vol) }],
    });
    assert.equal(ok.exitCode, 0, ok.stderr);
    await f.snapshotter.discard(own);
    await f.snapshotter.discard(vol);
  } finally {
    await f.done();
  }
});

/** The `sbx views` helper of a fixture's runtime: its pid, if it runs. */
const viewsHelper = (dir: string) => execFileSync('ps', ['-eo', 'pid=,args='], { encoding: 'utf8' }).split('\n')
  .find((l) => l.includes(`sbx views --dir ${dir}/helpers/views`))?.trim().split(/\s+/)[0];

/** A fixture's sandboxes over a read-only volume of the image and a layer holding /root/data/f. */
async function viewsFixture() {
  const f = await fixture(1);
  const layerWith = async (text: string) => {
    const s = await f.snapshotter.prepare({ diskMb: 64 });
    const r = await f.runtime.run({ mount: await f.snapshotter.mounts([f.image], s), argv: ['bash', '-c', `mkdir -p /root/data && echo ${text} > /root/data/f`], env: {}, cwd: '/root', limits: LIMITS });
    assert.equal(r.exitCode, 0, r.stderr);
    return (await f.snapshotter.commit(s))!.layerId;
  };
  // The file, the device of the volume's mount, a write's outcome and the mount's flags, as the command sees them.
  const look = async (layer: string, stdin?: string) => {
    const own = await f.snapshotter.prepare({ diskMb: 64 });
    try {
      const r = await f.runtime.run({
        mount: await f.snapshotter.mounts([f.image], own), env: {}, cwd: '/root', limits: LIMITS, stdin,
        argv: ['bash', '-c', 'cat /mnt/v/root/data/f; stat -c %d /mnt/v; (echo x > /mnt/v/root/x) 2>/dev/null && echo wrote || echo refused; grep " /mnt/v " /proc/self/mountinfo | cut -d" " -f6'],
        volumes: [{ target: '/mnt/v', readOnly: true, mount: await f.snapshotter.mounts([f.image, layer], own) }],
      });
      assert.equal(r.exitCode, 0, r.stderr);
      const [text, dev, write, flags] = r.stdout.trim().split('\n');
      return { text, dev, write, flags };
    } finally {
      await f.snapshotter.discard(own);
    }
  };
  // The first ask mounts an overlay of its own and asks for the view; once it is up, every sandbox shows the same mount.
  const bound = async (layer: string) => {
    let seen = await look(layer);
    let next = await look(layer);
    for (let i = 0; i < 100 && next.dev !== seen.dev; i++) { seen = next; next = await look(layer); }
    assert.equal(next.dev, seen.dev, 'two sandboxes in a row bind the same view');
    return [seen, next];
  };
  return { f, layerWith, look, bound };
}

test('bwrap runtime, warm: a read-only volume asked for again is bound from one view, read-only, outside the host\'s mount table; close ends the view helper', async () => {
  const { f, layerWith, look, bound } = await viewsFixture();
  try {
    const [one, two] = [await layerWith('one'), await layerWith('two')];
    const [seen, next] = await bound(one);
    for (const v of [seen, next]) assert.deepEqual(v, { text: 'one', dev: seen.dev, write: 'refused', flags: 'ro,nosuid,nodev,relatime' });
    assert.ok(viewsHelper(f.dir), 'sbx views runs');
    assert.ok(!readFileSync('/proc/self/mountinfo', 'utf8').includes(`${f.dir}/helpers/views`), 'no view is in the host\'s mount table');
    // Another version (layer stack) is another view; a cold sandbox (stdin) mounts its own.
    const other = await look(two);
    assert.equal(other.text, 'two');
    assert.notEqual(other.dev, seen.dev);
    const cold = await look(one, 'x');
    assert.equal(cold.text, 'one');
    assert.notEqual(cold.dev, seen.dev, 'the cold path mounts its own overlay');
  } finally {
    await f.done();
  }
  assert.equal(viewsHelper(f.dir), undefined, 'the runtime\'s close ends sbx views');
});

test('bwrap runtime, warm: when the view helper dies, sandboxes that named its views start cold and every answer is the same', async () => {
  const { f, layerWith, look, bound } = await viewsFixture();
  try {
    const one = await layerWith('one');
    await bound(one);
    process.kill(Number(viewsHelper(f.dir)), 'SIGKILL');
    for (let i = 0; i < 3; i++) {
      const { text, write, flags } = await look(one);
      assert.deepEqual({ text, write, flags }, { text: 'one', write: 'refused', flags: 'ro,nosuid,nodev,relatime' });
    }
  } finally {
    await f.done();
  }
});
