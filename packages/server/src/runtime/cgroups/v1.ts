import { existsSync, mkdirSync, readFileSync, rmdirSync } from 'node:fs';
import path from 'node:path';
import { newId } from '../../util/ids.js';
import { childCgroups, killAll, pidsOf, readInt, readKey, removeDir, signalAll, write } from './common.js';
import type { Cgroup, CgroupDriver, CgroupLimits, CgroupStats } from './types.js';

const CONTROLLERS = ['memory', 'pids', 'cpu', 'cpuacct'] as const;
type Controller = (typeof CONTROLLERS)[number];

/** Emptied cgroups kept for reuse: making a fresh v1 cgroup costs a sandbox start ~9 ms. */
const POOL_MAX = 8;

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

/**
 * cgroup v1: one directory per controller hierarchy, `<mount>/shellbase/<instance>/<id>`.
 * Cgroups are pooled: after a sandbox, its cgroup is emptied and its counters
 * reset, then handed to the next sandbox.
 */
export class CgroupV1Driver implements CgroupDriver {
  readonly version = 1 as const;
  private readonly bases: Record<Controller, string>;
  private readonly pool: CgroupV1[] = [];
  private closed = false;

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

  acquire(limits: CgroupLimits): Cgroup {
    let cg = this.pool.pop();
    if (!cg) {
      const id = newId('c');
      const dirs = Object.fromEntries(CONTROLLERS.map((c) => [c, path.join(this.bases[c], id)])) as Record<Controller, string>;
      for (const d of new Set(Object.values(dirs))) mkdirSync(d, { recursive: true });
      cg = new CgroupV1(dirs, (c) => this.release(c));
    }
    cg.setLimits(limits);
    return cg;
  }

  private async release(cg: CgroupV1): Promise<void> {
    if (!this.closed && this.pool.length < POOL_MAX && (await cg.reset())) this.pool.push(cg);
    else await cg.remove();
  }

  async recover(): Promise<number> {
    let n = 0;
    for (const base of this.hierarchies()) {
      for (const dir of childCgroups(base)) { await killAll(dir); await removeDir(dir); n++; }
    }
    return n;
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const cg of this.pool.splice(0)) await cg.remove();
    await this.recover();
    for (const base of this.hierarchies()) {
      await removeDir(base);
      try { rmdirSync(path.dirname(base)); } catch { /* other instances still use it */ }
    }
  }
}

class CgroupV1 implements Cgroup {
  readonly joinFiles: string[];
  private readonly unique: string[];
  private oomBase = 0;
  /**
   * Page cache charged by earlier sandboxes stays with a reused cgroup (it is
   * reclaimable, and reclaiming it eagerly would evict files every query
   * needs, such as bash): peaks are reported above this baseline.
   */
  private memoryBase = 0;

  constructor(private readonly dirs: Record<Controller, string>, private readonly onRelease: (cg: CgroupV1) => Promise<void>) {
    this.unique = [...new Set(Object.values(dirs))];
    // `tasks`, not `cgroup.procs`: moving one thread skips the kernel's global threadgroup lock (sbx.c).
    this.joinFiles = this.unique.map((d) => path.join(d, 'tasks'));
    this.oomBase = this.oomKills();
  }

  private file(c: Controller, name: string): string {
    return path.join(this.dirs[c], name);
  }

  private oomKills(): number {
    return readKey(this.file('memory', 'memory.oom_control'), 'oom_kill');
  }

  private limits: CgroupLimits | null = null;

  setLimits(limits: CgroupLimits): void {
    const l = this.limits;
    if (l && l.memoryMb === limits.memoryMb && l.pids === limits.pids && l.cpus === limits.cpus) return;
    this.limits = { ...limits };
    const bytes = limits.memoryMb * 1024 * 1024;
    const memsw = this.file('memory', 'memory.memsw.limit_in_bytes');
    // The memory+swap limit may never be below the memory limit: raise it first, lower it last.
    const hasSwapLimit = existsSync(memsw);
    const raising = hasSwapLimit && bytes > readInt(memsw);
    if (raising) write(memsw, String(bytes));
    write(this.file('memory', 'memory.limit_in_bytes'), String(bytes));
    if (hasSwapLimit && !raising) write(memsw, String(bytes));
    write(this.file('pids', 'pids.max'), String(limits.pids));
    write(this.file('cpu', 'cpu.cfs_period_us'), '100000');
    this.cap = Math.round(limits.cpus * 100000);
    write(this.file('cpu', 'cpu.cfs_quota_us'), String(this.cap));
  }

  stats(): CgroupStats {
    return {
      cpuMs: Math.round(readInt(this.file('cpuacct', 'cpuacct.usage')) / 1e6),
      memoryPeakBytes: Math.max(0, readInt(this.file('memory', 'memory.max_usage_in_bytes')) - this.memoryBase),
      oomKilled: this.oomKills() > this.oomBase,
    };
  }

  signal(sig: NodeJS.Signals): void {
    signalAll(this.dirs.pids, sig);
  }

  private cap = 0;

  setCpuCap(cpus: number): void {
    const quota = Math.max(1000, Math.round(cpus * 100000));
    if (quota === this.cap) return;
    write(this.file('cpu', 'cpu.cfs_quota_us'), String(quota));
    this.cap = quota;
  }

  private shares = 1024;

  setWeight(weight: number): void {
    const shares = Math.max(2, Math.round(1024 * weight));
    if (shares === this.shares) return;
    write(this.file('cpu', 'cpu.shares'), String(shares));
    this.shares = shares;
  }

  async kill(): Promise<void> {
    await killAll(this.dirs.pids);
  }

  release(): Promise<void> {
    return this.onRelease(this);
  }

  /** Empties the cgroup and resets its counters for the next sandbox; false if it could not be emptied. */
  async reset(): Promise<boolean> {
    await this.kill();
    for (let i = 0; i < 50 && this.unique.some((d) => pidsOf(d).length > 0); i++) await new Promise((r) => setTimeout(r, 5));
    if (this.unique.some((d) => pidsOf(d).length > 0)) return false;
    try {
      write(this.file('memory', 'memory.max_usage_in_bytes'), '0');
      write(this.file('cpuacct', 'cpuacct.usage'), '0');
    } catch {
      return false;
    }
    this.oomBase = this.oomKills();
    this.memoryBase = readInt(this.file('memory', 'memory.usage_in_bytes'));
    return true;
  }

  async remove(): Promise<void> {
    await this.kill();
    for (const d of this.unique) await removeDir(d);
  }
}
