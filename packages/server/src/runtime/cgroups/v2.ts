import { existsSync, mkdirSync, readFileSync, rmdirSync } from 'node:fs';
import path from 'node:path';
import { newId } from '../../util/ids.js';
import { childCgroups, killAll, readKey, readInt, removeDir, signalAll, write } from './common.js';
import type { Cgroup, CgroupDriver, CgroupLimits, CgroupStats } from './types.js';

const ROOT = '/sys/fs/cgroup';
const NEEDED = ['memory', 'pids', 'cpu'];

/** cgroup v2: `/sys/fs/cgroup/shellbase/<instance>/<id>`, controllers delegated down the path. */
export class CgroupV2Driver implements CgroupDriver {
  readonly version = 2 as const;
  private readonly base: string;

  constructor(instance: string, root = ROOT) {
    this.base = path.join(root, 'shellbase', instance);
    // Enable the controllers at every level from the root down to our base.
    let dir = root;
    for (const part of ['shellbase', instance]) {
      enableControllers(dir);
      dir = path.join(dir, part);
      mkdirSync(dir, { recursive: true });
    }
    enableControllers(dir);
  }

  acquire(limits: CgroupLimits): Cgroup {
    const dir = path.join(this.base, newId('c'));
    mkdirSync(dir);
    write(path.join(dir, 'memory.max'), String(limits.memoryMb * 1024 * 1024));
    if (existsSync(path.join(dir, 'memory.swap.max'))) write(path.join(dir, 'memory.swap.max'), '0');
    write(path.join(dir, 'pids.max'), String(limits.pids));
    write(path.join(dir, 'cpu.max'), `${Math.round(limits.cpus * 100000)} 100000`);
    return new CgroupV2(dir);
  }

  async recover(): Promise<number> {
    let n = 0;
    for (const dir of childCgroups(this.base)) { await new CgroupV2(dir).release(); n++; }
    return n;
  }

  async close(): Promise<void> {
    await this.recover();
    await removeDir(this.base);
    try { rmdirSync(path.dirname(this.base)); } catch { /* other instances still use it */ }
  }
}

function enableControllers(dir: string): void {
  const available = readFileSync(path.join(dir, 'cgroup.controllers'), 'utf8').trim().split(/\s+/);
  const missing = NEEDED.filter((c) => !available.includes(c));
  if (missing.length) throw new Error(`cgroup v2 at ${dir} lacks controllers: ${missing.join(', ')}`);
  write(path.join(dir, 'cgroup.subtree_control'), NEEDED.map((c) => `+${c}`).join(' '));
}

class CgroupV2 implements Cgroup {
  readonly joinFiles: string[];

  constructor(private readonly dir: string) {
    this.joinFiles = [path.join(dir, 'cgroup.procs')];
  }

  stats(): CgroupStats {
    return {
      cpuMs: Math.round(readKey(path.join(this.dir, 'cpu.stat'), 'usage_usec') / 1000),
      memoryPeakBytes: readInt(path.join(this.dir, 'memory.peak')),
      oomKilled: readKey(path.join(this.dir, 'memory.events'), 'oom_kill') > 0,
    };
  }

  signal(sig: NodeJS.Signals): void {
    signalAll(this.dir, sig);
  }

  setCpuCap(cpus: number): void {
    write(path.join(this.dir, 'cpu.max'), `${Math.max(1000, Math.round(cpus * 100000))} 100000`);
  }

  setWeight(weight: number): void {
    write(path.join(this.dir, 'cpu.weight'), String(Math.max(1, Math.min(10000, Math.round(100 * weight)))));
  }

  async kill(): Promise<void> {
    const killFile = path.join(this.dir, 'cgroup.kill');
    if (existsSync(killFile)) write(killFile, '1');
    await killAll(this.dir);
  }

  /** v2 cgroups are cheap to make and their peak counters cannot be reset everywhere: never reused. */
  async release(): Promise<void> {
    await this.kill();
    await removeDir(this.dir);
  }
}
