import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import type { BtrfsSnapshotter } from '../packages/server/src/store/snapshotter/btrfs/btrfs-snapshotter.ts';
import { storeOp, storeServer } from '../packages/server/src/store/snapshotter/btrfs/store-server.ts';
import { scanLayer } from '../packages/server/src/store/snapshotter/btrfs/scan.ts';
import { SBX_STORE } from '../packages/server/src/util/native.ts';
import { tempBtrfsStore } from './btrfs-store.ts';

// `sbx-store serve` (native/serve.c), the long-running helper every query's store operations go
// through, on a real btrfs volume (the snapshotter's own).
let dir: string;
let root: string;
let store: BtrfsSnapshotter;

before(async () => {
  ({ dir, root, store } = tempBtrfsStore(0));
  await store.open();
});

after(async () => {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

test('store server: a scan answers what `sbx-store scan` prints, and requests in flight at once each get their own answer', async () => {
  const base = path.join(root, 'trees');
  for (let i = 0; i < 24; i++) {
    const t = path.join(base, `t${i}`);
    mkdirSync(path.join(t, 'd', 'opaque'), { recursive: true });
    execFileSync('setfattr', ['-n', 'trusted.overlay.opaque', '-v', 'y', path.join(t, 'd', 'opaque')]);
    execFileSync('mknod', [path.join(t, 'd', 'gone'), 'c', '0', '0']);
    writeFileSync(path.join(t, `only-${i}`), 'x'.repeat(i));
  }
  const once = execFileSync(SBX_STORE, ['scan', path.join(base, 't3')]);
  assert.deepEqual((await storeServer.request('scan', path.join(base, 't3'))).body, once);
  // Scans and syncs interleaved: answers come in any order, each to its own request.
  const answers = await Promise.all(Array.from({ length: 24 }, (_, i) => (i % 6 === 0 ? storeOp('sync', root).then(() => null) : scanLayer(path.join(base, `t${i}`)))));
  answers.forEach((a, i) => {
    if (i % 6 === 0) return assert.equal(a, null);
    assert.deepEqual(a!.changes, [['/d', 'd'], ['/d/gone', 'w'], ['/d/opaque', 'O'], [`/only-${i}`, 'f']]);
    assert.equal(a!.bytes, i);
  });
  // A failure is an answer too, and names its path.
  await assert.rejects(scanLayer(path.join(base, 'absent')), /absent: No such file or directory/);
  await assert.rejects(storeServer.request('scan', `${base}\nt1`), /newline/);
});

test('store server: delete removes a subvolume or a plain tree, is fine with an absent one, and never crosses into another file system', async () => {
  await storeOp('scratch', path.join(root, 'scratch', 'del'), [100_000, 16]);
  const sub = path.join(root, 'scratch', 'del');
  assert.equal(statSync(sub).ino, 256);
  writeFileSync(path.join(sub, 'tree', 'f'), 'x');
  await storeOp('delete', sub);
  assert.ok(!existsSync(sub));
  await storeOp('delete', sub); // absent: fine

  const plain = path.join(root, 'plain');
  mkdirSync(path.join(plain, 'locked', 'deep'), { recursive: true });
  writeFileSync(path.join(plain, 'locked', 'deep', 'f'), 'x');
  execFileSync('chmod', ['000', path.join(plain, 'locked')]);
  await storeOp('delete', plain);
  assert.ok(!existsSync(plain));

  const crossing = path.join(root, 'crossing');
  mkdirSync(path.join(crossing, 'mnt'), { recursive: true });
  execFileSync('mount', ['-t', 'tmpfs', 'tmpfs', path.join(crossing, 'mnt')]);
  try {
    writeFileSync(path.join(crossing, 'mnt', 'kept'), 'x');
    await assert.rejects(storeOp('delete', crossing), /crossing: Directory not empty/);
    assert.deepEqual(readdirSync(path.join(crossing, 'mnt')), ['kept'], 'nothing on the other file system was removed');
  } finally {
    execFileSync('umount', [path.join(crossing, 'mnt')]);
  }
  await storeOp('delete', crossing);
  assert.ok(!existsSync(crossing));
});

test('store server: requests pending when the process dies fail, and the next request starts it again', async () => {
  storeServer.start();
  const pid = storeServer.pid!;
  process.kill(pid, 'SIGSTOP');
  const pending = storeOp('sync', root);
  process.kill(pid, 'SIGKILL');
  await assert.rejects(pending, /sbx-store serve exited/);
  await storeOp('sync', root);
  assert.ok(storeServer.pid && storeServer.pid !== pid, 'a new process answered');
});
