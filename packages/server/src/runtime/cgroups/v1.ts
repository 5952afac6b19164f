import { existsSync, mkdirSync, readFileSync, rmdirSync } from 'node:fs';
import path from 'node:path';
import { childCgroups, killAll, readInt, readKey, removeDir, write } from './common.js';
import type { Cgroup, CgroupDriver, CgroupLimits, CgroupStats } from './types.js';

const CONTROLLERS = ['memory', 'pids', 'cpu', 'cpuacct'] as const;
type Controller = (typeof CONTROLLERS)[number];

/** Where each v1 controller's hierarchy is mounted, from /proc/self/mountinfo. */
export function v1Mounts(): Partial<Record<Controller, string>> {
  const found: Partial<Record<Controller, string>> = {};
  for (const line of readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
    const f = line.split(' ');
    const dash = f.indexOf('-');
    if (dash < 0 || f[dash + 1] !== 'cgroup') continue;
    const opts = (f[dash + 3] ?? '').split(',');
    for (const c of CONTROLLERS) if (opts.includes(c) && !found[c]) found[c] = f[4];
  }
  return found;
}

/** cgroup v1: one directory per controller hierarchy, `<mount>/shellbase/<instance>/<id>`. */
export class CgroupV1Driver implements CgroupDriver {
  readonly version = 1 as const;
  private readonly bases: Record<Controller, string>;

  constructor(instance: string) {
    const mounts = v1Mounts();
    const missing = CONTROLLERS.filter((c) => !mounts[c]);
    if (missing.length) throw new Error(`cgroup v1 controllers not mounted: ${missing.join(', ')}`);
    this.bases = Object.fromEntries(
      CONTROLLERS.map((c) => [c, path.join(mounts[c]!, 'shellbase', instance)]),
    ) as Record<Controller, string>;
  }

  /** One directory per distinct hierarchy (cpu and cpuacct are often one). */
  private hierarchies(): string[] {
    return [...new Set(Object.values(this.bases))];
  }

  create(id: string, limits: CgroupLimits): Cgroup {
    const dirs = Object.fromEntries(CONTROLLERS.map((c) => [c, path.join(this.bases[c], id)])) as Record<Controller, string>;
    const unique = [...new Set(Object.values(dirs))];
    for (const d of unique) mkdirSync(d, { recursive: true });
    const bytes = limits.memoryMb * 1024 * 1024;
    write(path.join(dirs.memory, 'memory.limit_in_bytes'), String(bytes));
    const memsw = path.join(dirs.memory, 'memory.memsw.limit_in_bytes');
    if (existsSync(memsw)) write(memsw, String(bytes));
    write(path.join(dirs.pids, 'pids.max'), String(limits.pids));
    write(path.join(dirs.cpu, 'cpu.cfs_period_us'), '100000');
    write(path.join(dirs.cpu, 'cpu.cfs_quota_us'), String(Math.round(limits.cpus * 100000)));
    return new CgroupV1(dirs, unique);
  }

  async recover(): Promise<number> {
    let n = 0;
    for (const base of this.hierarchies()) {
      for (const dir of childCgroups(base)) { await killAll(dir); await removeDir(dir); n++; }
    }
    return n;
  }

  async close(): Promise<void> {
    await this.recover();
    for (const base of this.hierarchies()) {
      await removeDir(base);
      try { rmdirSync(path.dirname(base)); } catch { /* other instances still use it */ }
    }
  }
}

class CgroupV1 implements Cgroup {
  readonly procsFiles: string[];

  constructor(private readonly dirs: Record<Controller, string>, private readonly unique: string[]) {
    this.procsFiles = unique.map((d) => path.join(d, 'cgroup.procs'));
  }

  stats(): CgroupStats {
    return {
      cpuMs: Math.round(readInt(path.join(this.dirs.cpuacct, 'cpuacct.usage')) / 1e6),
      memoryPeakBytes: readInt(path.join(this.dirs.memory, 'memory.max_usage_in_bytes')),
      oomKilled: readKey(path.join(this.dirs.memory, 'memory.oom_control'), 'oom_kill') > 0,
    };
  }

  async kill(): Promise<void> {
    await killAll(this.dirs.pids);
  }

  async remove(): Promise<void> {
    await this.kill();
    for (const d of this.unique) await removeDir(d);
  }
}
