import { execFile } from 'node:child_process';
import { chmodSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { loadConfig, restoreServer } from '@shellbase/server';
import { latency, value, type Bench } from '../lib.ts';
import { spawnServer } from '../../test/harness.ts';
import { stop } from './history-scale.ts';

const run = promisify(execFile);
const p50 = (s: number[]) => [...s].sort((x, y) => x - y)[Math.floor(s.length / 2)];

/**
 * Scenario 18, backup: (1) a store of `versions` versions (100 contexts, written through the
 * files API, each version a layer), backed up whole once, then one new version and an
 * incremental backup, timed (goal ≤ 1 s at 10,000 versions); (2) a context of `gib` GiB (eight
 * layers, half random bytes, half text) backed up alone, then restored into a fresh home, against
 * `zstd -d | tar -x` of the same layers' files packed by `tar | zstd -3`, then `sync -f` (a restore
 * is durable: its home's file system is flushed when it ends), interleaved run by run (goal ≥ 0.7×
 * its throughput: a ratio ≤ 1.43).
 */
export async function backup(b: Bench): Promise<void> {
  const { t } = b;
  const versions = b.quick ? 1000 : 10_000;
  const contexts = 100;
  const work = mkdtempSync(path.join(tmpdir(), 'shellbase-bench-backup-'));
  // Passable: a server's home below it holds its sandboxes' trees.
  chmodSync(work, 0o711);
  try {
    const fill0 = performance.now();
    await Promise.all(Array.from({ length: 4 }, async (_, w) => {
      for (let i = w; i < versions; i += 4) await t.sb.context(`bk-${i % contexts}`).files.write(`/root/f${Math.floor(i / contexts)}`, `${i}\n`);
    }));
    value(b, `backup: ${versions} versions written for it (files API, 4 writers)`, 'time', (performance.now() - fill0) / 1000, 's');
    const target = path.join(work, 'target');
    const full0 = performance.now();
    const full = await t.sb.backup({ to: target });
    value(b, `backup: the first (full) backup of a ${versions}-version store`, 'time', (performance.now() - full0) / 1000, 's');
    value(b, `backup: layers in the full backup`, 'layers', full.layers, 'layers');
    const incremental: number[] = [];
    for (let i = 0; i < (b.quick ? 3 : 5); i++) {
      await t.sb.context('bk-0').files.write(`/root/inc${i}`, `${i}\n`);
      const t0 = performance.now();
      const r = await t.sb.backup({ to: target });
      incremental.push(performance.now() - t0);
      if (r.copied > 3) throw new Error(`an incremental backup copied ${r.copied} layers`);
    }
    latency(b, `backup: incremental, one new version in a ${versions}-version store`, incremental);

    // (2) on a server of its own, so the backup holds the big context and nothing else.
    const gib = b.quick ? 0.25 : 1;
    const part = Math.round((gib * 1024) / 8);
    const home = path.join(work, 'big-home');
    const { child, sb } = await spawnServer(home);
    const bigTarget = path.join(work, 'big');
    let trees: string[];
    try {
      await sb.contexts.create({ name: 'bk-big', image: 'debian' });
      for (let i = 0; i < 8; i++) {
        const cmd = i % 2 ? `seq 1 1000000000 | head -c ${part}M > /root/t${i}` : `head -c ${part}M /dev/urandom > /root/r${i}`;
        await sb.context('bk-big').exec(cmd, { timeoutMs: 600_000, limits: { diskMb: part * 3 } });
      }
      await sb.backup({ to: bigTarget });
      const layers = path.join(home, 'store', 'layers');
      trees = readdirSync(layers).filter((n) => !n.endsWith('.json')).map((l) => path.join(layers, l, 'tree'));
      await run('sh', ['-c', `tar -cf - ${trees.map((x) => `-C '${x}' .`).join(' ')} | zstd -3 -q -c > '${path.join(work, 'baseline.tar.zst')}'`], { maxBuffer: 1 << 20 });
    } finally {
      await stop(child);
    }
    const packed = path.join(work, 'baseline.tar.zst');
    const baseline: number[] = [];
    const restored: number[] = [];
    for (let i = 0; i < (b.quick ? 2 : 3); i++) {
      const out = mkdtempSync(path.join(work, 'untar-'));
      let start = performance.now();
      // Durable, as a restore is (its home's file system is flushed when the restore closes it).
      await run('sh', ['-c', `zstd -d -q -c '${packed}' | tar -x -C '${out}' && sync -f '${out}'`], { maxBuffer: 1 << 20 });
      baseline.push(performance.now() - start);
      rmSync(out, { recursive: true, force: true });
      const fresh = mkdtempSync(path.join(work, 'home-'));
      start = performance.now();
      await restoreServer(loadConfig({ home: fresh, storeSizeGb: 16 }), bigTarget, {});
      restored.push(performance.now() - start);
      rmSync(fresh, { recursive: true, force: true });
    }
    b.baselines.set('zstd -d | tar -x', latency(b, `backup: zstd -d | tar -x of ${gib} GiB of files, synced (baseline)`, baseline));
    latency(b, `backup: restore of a ${gib} GiB store into a fresh home`, restored, 'zstd -d | tar -x');
    value(b, `backup: zstd -d | tar -x of ${gib} GiB`, 'MB/s', (gib * 1073.741824) / (p50(baseline) / 1000), 'MB/s', baseline.length);
    value(b, `backup: restore of ${gib} GiB`, 'MB/s', (gib * 1073.741824) / (p50(restored) / 1000), 'MB/s', restored.length);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}
