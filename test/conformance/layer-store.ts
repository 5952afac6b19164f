import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync, rmSync, symlinkSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import type { LayerStore } from '../../packages/server/src/store/layers/types.ts';

/**
 * The cases every LayerStore backend must pass. `writeInto` stands for a
 * sandbox: it writes into a scratch the way overlayfs would (the backend's
 * mount description is exercised by the integration tests).
 */
export function layerStoreConformance(name: string, make: () => Promise<{ store: LayerStore; upperOf: (s: { id: string }) => string; done: () => Promise<void> }>) {
  test(`${name}: an untouched scratch commits to nothing`, async () => {
    const { store, done } = await make();
    try {
      const s = await store.prepare({ diskMb: 16 });
      assert.equal(await store.commit(s), null);
    } finally { await done(); }
  });

  test(`${name}: release drops a scratch and tells what it held`, async () => {
    const { store, upperOf, done } = await make();
    try {
      const empty = await store.prepare({ diskMb: 16 });
      assert.equal(await store.release(empty), 0);
      const s = await store.prepare({ diskMb: 16 });
      writeFileSync(path.join(upperOf(s), 'five'), '12345');
      assert.equal(await store.release(s), 5);
      assert.equal(existsSync(upperOf(s)), false, 'a written scratch is gone, not reused');
    } finally { await done(); }
  });

  test(`${name}: remove deletes a layer and its record of opaque directories`, async () => {
    const { store, upperOf, done } = await make();
    try {
      const s = await store.prepare({ diskMb: 16 });
      writeFileSync(path.join(upperOf(s), 'f'), 'x');
      const layer = (await store.commit(s))!;
      assert.equal((await store.viewLayer(layer.layerId)).opaque.size, 0);
      await store.remove(layer.layerId);
      assert.equal(existsSync(store.layerPath(layer.layerId)), false);
    } finally { await done(); }
  });

  test(`${name}: commit lists every path with its type and the bytes written`, async () => {
    const { store, upperOf, done } = await make();
    try {
      const s = await store.prepare({ diskMb: 16 });
      const up = upperOf(s);
      mkdirSync(path.join(up, 'root'));
      writeFileSync(path.join(up, 'root/a'), 'hello');
      symlinkSync('/etc/passwd', path.join(up, 'link'));
      execFileSync('mknod', [path.join(up, 'gone'), 'c', '0', '0']);
      mkdirSync(path.join(up, 'opaque'));
      execFileSync('setfattr', ['-n', 'trusted.overlay.opaque', '-v', 'y', path.join(up, 'opaque')]);
      const layer = await store.commit(s);
      assert.ok(layer);
      assert.equal(layer.bytes, 5);
      assert.deepEqual(layer.changes, [['/gone', 'w'], ['/link', 'l'], ['/opaque', 'O'], ['/root', 'd'], ['/root/a', 'f']]);
      assert.equal(readFileSync(path.join(store.layerPath(layer.layerId), 'root/a'), 'utf8'), 'hello');
      const spec = store.mountSpec(['image:debian:x', layer.layerId], await store.prepare({ diskMb: 16 }));
      assert.equal(spec.lower.split(':')[0].endsWith(`${layer.layerId}/tree`), true, `top layer first: ${spec.lower}`);
    } finally { await done(); }
  });

  test(`${name}: squash stacks layers as overlayfs would`, async () => {
    const { store, upperOf, done } = await make();
    try {
      const commit = async (fill: (up: string) => void) => {
        const s = await store.prepare({ diskMb: 16 });
        fill(upperOf(s));
        return (await store.commit(s))!.layerId;
      };
      const a = await commit((up) => { mkdirSync(path.join(up, 'd')); writeFileSync(path.join(up, 'd/x'), 'x'); writeFileSync(path.join(up, 'f'), '1'); });
      const b = await commit((up) => { execFileSync('mknod', [path.join(up, 'd'), 'c', '0', '0']); writeFileSync(path.join(up, 'f'), '2'); });
      const c = await commit((up) => { mkdirSync(path.join(up, 'd')); writeFileSync(path.join(up, 'd/y'), 'y'); });
      const squashed = await store.squash([a, b, c]);
      const tree = store.layerPath(squashed.layerId);
      assert.equal(readFileSync(path.join(tree, 'f'), 'utf8'), '2');
      assert.deepEqual(execFileSync('ls', [path.join(tree, 'd')], { encoding: 'utf8' }), 'y\n');
      const opaque = execFileSync('getfattr', ['--only-values', '-n', 'trusted.overlay.opaque', path.join(tree, 'd')], { encoding: 'utf8' });
      assert.equal(opaque, 'y', 'a directory over a whiteout must not merge with lower layers');
    } finally { await done(); }
  });

  test(`${name}: recover drops scratch space and unreferenced layers only`, async () => {
    const { store, upperOf, done } = await make();
    try {
      const keep = await store.prepare({ diskMb: 16 });
      writeFileSync(path.join(upperOf(keep), 'k'), 'k');
      const kept = (await store.commit(keep))!.layerId;
      const lose = await store.prepare({ diskMb: 16 });
      writeFileSync(path.join(upperOf(lose), 'l'), 'l');
      const lost = (await store.commit(lose))!.layerId;
      const pending = await store.prepare({ diskMb: 16 });
      const r = await store.recover(new Set([kept]));
      assert.equal(r.layers, 1);
      assert.ok(r.scratch >= 1);
      assert.equal(readFileSync(path.join(store.layerPath(kept), 'k'), 'utf8'), 'k');
      assert.equal(existsSync(store.layerPath(lost)), false, 'the unreferenced layer is gone');
      assert.equal(existsSync(upperOf(pending)), false, 'the scratch is gone');
    } finally { await done(); }
  });
}

export function cleanup(dir: string) { rmSync(dir, { recursive: true, force: true }); }
