import { spawnSync, type SpawnSyncReturns } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { SBX } from '../packages/server/src/util/native.ts';
import { latency, time, type Bench } from './lib.ts';

/**
 * The floors every scenario is framed by, run in the same process and minute:
 * starting any process, an isolated start over the same overlay, and a
 * container-per-request start with runc over the same root file system.
 */
export async function baselines(b: Bench, rootfs: string): Promise<void> {
  const dir = mkdtempSync(path.join(tmpdir(), 'shellbase-bench-'));
  try {
    for (const d of ['up', 'work', 'merged']) mkdirSync(path.join(dir, d));
    b.baselines.set('fork+exec', latency(b, 'baseline: fork+exec /bin/true', await time(b.n, () => spawnSync('/bin/true'))));
    const bwrap = await time(b.n, () => ok(spawnSync(SBX, ['run', '--chdir', dir, '--lower', rootfs, '--upper', 'up',
      '--work', 'work', '--merged', 'merged', '--', 'bwrap', '--unshare-all', '--die-with-parent', '--bind',
      path.join(dir, 'merged'), '/', '--proc', '/proc', '--dev', '/dev', '--', '/bin/true'])));
    b.baselines.set('bare bwrap', latency(b, 'baseline: bare bwrap true over the same overlay', bwrap));
    const bundle = path.join(dir, 'bundle');
    mkdirSync(bundle);
    if (spawnSync('runc', ['spec'], { cwd: bundle }).status === 0) {
      const config = JSON.parse(String(spawnSync('cat', [path.join(bundle, 'config.json')]).stdout));
      config.root = { path: rootfs, readonly: true };
      config.process.args = ['/bin/true'];
      config.process.terminal = false;
      writeFileSync(path.join(bundle, 'config.json'), JSON.stringify(config));
      let i = 0;
      const runc = await time(Math.ceil(b.n / 2), () => ok(spawnSync('runc', ['run', '--bundle', bundle, `sb-bench-${process.pid}-${i++}`])));
      b.baselines.set('runc', latency(b, 'baseline: runc run true over the same rootfs', runc));
    } else {
      console.error('runc is not installed: its baseline is left out');
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** A baseline that failed would time its failure: stop the bench instead. */
function ok(r: SpawnSyncReturns<Buffer>): void {
  if (r.status !== 0) throw new Error(`baseline command failed (${r.status ?? r.signal}): ${String(r.stderr).trim()}`);
}
