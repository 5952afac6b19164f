import assert from 'node:assert/strict';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { imageInfo, imageRootfs, loadConfig } from '../../packages/server/src/index.ts';
import { BwrapRuntime, cgroupDriver } from '../../packages/server/src/runtime/index.ts';
import { BtrfsSnapshotter } from '../../packages/server/src/store/snapshotter/btrfs/btrfs-snapshotter.ts';
import { MACHINE_ROOT, SANDBOX_ROOT } from '../../packages/server/src/util/idmap.ts';
import { Dialer } from '../../packages/server/src/util/dialer.ts';
import { hostProgramsConformance } from './host-programs.ts';

const PREFIX = path.join(tmpdir(), 'shellbase-host-programs-');
const INSTANCE = `hostprogs${process.pid}`;
const BEFORE = new Set(children());

// As bwrap-runtime.test.ts makes its runtime, with a directory for the case's files beside the store.
hostProgramsConformance('bwrap runtime', async () => {
  const dir = mkdtempSync(PREFIX);
  chmodSync(dir, 0o711); // passable by the sandboxes' root and the jails', as a server's home is
  const cache = loadConfig().cache;
  const dialer = new Dialer(path.join(dir, 'streams'));
  const snapshotter = new BtrfsSnapshotter({
    root: path.join(dir, 'store'), imageFile: path.join(dir, 'store.btrfs'), sizeGb: 2, imagePath: (id) => imageRootfs(cache, id),
    defaultDiskMb: 64, poolSize: 0, rootId: SANDBOX_ROOT, dialer,
  });
  await snapshotter.open();
  const runtime = new BwrapRuntime(cgroupDriver(INSTANCE), { dialer });
  const files = path.join(dir, 'case');
  mkdirSync(files);
  chmodSync(files, 0o711);
  return {
    runtime, snapshotter, image: imageInfo(cache, 'debian').layerId, imageFile: '/etc/debian_version',
    dir: files, ids: { sandboxRoot: SANDBOX_ROOT, jailRoot: MACHINE_ROOT },
    done: async () => { await runtime.close(); await snapshotter.close(); rmSync(dir, { recursive: true, force: true }); },
  };
});

/** Processes below this one (by parent), but for those there before the cases and the server's long-lived helpers (the spawner, the store server). */
function children(): string[] {
  const byParent = new Map<number, { pid: number; args: string }[]>();
  for (const e of readdirSync('/proc').filter((n) => /^\d+$/.test(n))) {
    try {
      const stat = readFileSync(`/proc/${e}/stat`, 'utf8');
      const [state, ppid] = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (state === 'Z') continue;
      const args = readFileSync(`/proc/${e}/cmdline`, 'utf8').replaceAll('\0', ' ').trim();
      byParent.set(Number(ppid), [...byParent.get(Number(ppid)) ?? [], { pid: Number(e), args }]);
    } catch { /* ended meanwhile */ }
  }
  const left: string[] = [];
  const queue = [process.pid];
  while (queue.length) {
    for (const c of byParent.get(queue.shift()!) ?? []) {
      queue.push(c.pid);
      if (!/\/sbx-(spawner|store serve)$/.test(c.args)) left.push(`${c.pid} ${c.args}`);
    }
  }
  return left;
}

test('bwrap runtime: the host programs\' cases leave no mount, process or cgroup behind', () => {
  const mounts = readFileSync('/proc/self/mountinfo', 'utf8').split('\n').filter((l) => l.includes(PREFIX));
  assert.deepEqual(mounts, []);
  const named = readdirSync('/proc').filter((n) => /^\d+$/.test(n)).filter((n) => {
    try { return readFileSync(`/proc/${n}/cmdline`, 'utf8').includes(PREFIX); } catch { return false; }
  });
  assert.deepEqual(named, [], 'no process names a case\'s directory');
  assert.deepEqual(children().filter((c) => !BEFORE.has(c)), [], 'no process of the cases is left below this one');
  const roots = ['/sys/fs/cgroup', ...readdirSync('/sys/fs/cgroup').map((c) => path.join('/sys/fs/cgroup', c))];
  assert.deepEqual(roots.map((r) => path.join(r, 'shellbase', INSTANCE)).filter((d) => existsSync(d)), []);
  assert.deepEqual(readdirSync(tmpdir()).filter((n) => path.join(tmpdir(), n).startsWith(PREFIX)), [], 'every case\'s directory is removed');
});
