import { readdirSync, rmSync, statSync, type Dirent } from 'node:fs';
import path from 'node:path';
import type { Deps } from '../../core/deps.js';
import type { MachineLayout } from '../layout.js';

function list(dir: string): string[] {
  try { return readdirSync(dir); } catch { return []; }
}

/** Bytes allocated on disk under `dir` (sparse files count what they hold). */
function allocated(dir: string): number {
  let total = 0;
  let entries: Dirent[] = [];
  try { entries = readdirSync(dir, { withFileTypes: true }); } catch { return 0; }
  for (const e of entries) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) total += allocated(p);
    else if (e.isFile()) { try { total += statSync(p).blocks * 512; } catch { /* gone meanwhile */ } }
  }
  return total;
}

/** The files machines and snapshots hold on disk: what each tenant stores, and what nothing names any more. */
export class MachineDisks {
  constructor(private readonly deps: Pick<Deps, 'metadata' | 'log'>, private readonly layout: MachineLayout) {}

  /**
   * Deletes the files of a deleted machine's or snapshot's disk chain that no other machine or
   * snapshot of the tenant names (frozen layers are shared by forks). Only files of the tenant's
   * own disk directory: templates stay.
   */
  async collect(tenantId: string, chain: readonly string[]): Promise<void> {
    try {
      const keep = await this.chainFiles(tenantId);
      const dir = this.layout.disksDir(tenantId);
      for (const file of chain) if (path.dirname(file) === dir && !keep.has(file)) rmSync(file, { force: true });
    } catch (err) {
      this.deps.log.error({ err }, 'collecting machine disks failed');
    }
  }

  /**
   * Cluster mode: what this worker holds for machines and snapshots that moved on or were deleted
   * on another worker (disk files no chain names, snapshot directories with no row), untouched
   * for `idleMs` (files being made for a create or a snapshot are younger). Returns how many went.
   */
  async collectStray(idleMs: number): Promise<number> {
    const named = await this.chainFiles();
    const snapshots = new Set((await this.deps.metadata.machines.listSnapshots()).map((s) => s.id));
    const old = (p: string) => { try { return Date.now() - statSync(p).mtimeMs >= idleMs; } catch { return false; } };
    let n = 0;
    for (const tenant of list(this.layout.tenantsDir)) {
      const disks = this.layout.disksDir(tenant);
      for (const f of list(disks).map((d) => path.join(disks, d))) {
        if (f.endsWith('.qcow2') && !named.has(f) && old(f)) { rmSync(f, { force: true }); n++; }
      }
      for (const id of list(path.dirname(this.layout.snapshotDir(tenant, 'x')))) {
        const dir = this.layout.snapshotDir(tenant, id);
        if (!snapshots.has(id) && old(dir)) { rmSync(dir, { recursive: true, force: true }); n++; }
      }
    }
    return n;
  }

  /**
   * A server's or cluster worker's start (nothing is being made yet; a worker's run directories
   * and disks are its own): what a crash left of machines that have no row — their run
   * directories, and disk files named after them (`ID-d_….qcow2`) that no machine's or
   * snapshot's chain names (by file name: a moved home keeps its files): ready VMs'
   * (machines/pool/ready.ts), and those of creates cut short. Returns how many went.
   */
  async sweep(): Promise<number> {
    const ids = new Set((await this.deps.metadata.machines.list()).map((m) => m.id));
    const named = new Set([...await this.chainFiles()].map((f) => path.basename(f)));
    let n = 0;
    for (const id of list(this.layout.runRoot)) {
      if (/^m_[a-z0-9]+$/.test(id) && !ids.has(id)) { rmSync(this.layout.runDir(id), { recursive: true, force: true }); n++; }
    }
    for (const tenant of list(this.layout.tenantsDir)) {
      const disks = this.layout.disksDir(tenant);
      for (const name of list(disks)) {
        const owner = /^(m_[a-z0-9]+)-d_[a-z0-9]+\.qcow2$/.exec(name)?.[1];
        if (owner && !ids.has(owner) && !named.has(name)) { rmSync(path.join(disks, name), { force: true }); n++; }
      }
    }
    return n;
  }

  /** Every file the disk chains of machines and snapshots name (of one tenant, or of all). */
  async chainFiles(tenantId?: string): Promise<Set<string>> {
    const files = new Set<string>();
    for (const m of await this.deps.metadata.machines.list(tenantId)) for (const d of m.spec.disk) files.add(d);
    for (const s of await this.deps.metadata.machines.listSnapshots(tenantId)) for (const d of s.spec.disk) files.add(d);
    return files;
  }

  /** Bytes a tenant's machines hold on disk: disks, snapshots, templates of its versions, hibernated memory. */
  async storedBytes(tenantId: string): Promise<number> {
    let total = allocated(this.layout.tenantDir(tenantId));
    for (const m of await this.deps.metadata.machines.list(tenantId)) if (m.state === 'hibernated') total += allocated(this.layout.runDir(m.id));
    return total;
  }
}
