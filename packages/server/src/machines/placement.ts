import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { Logger } from 'pino';
import type { ServerConfig } from '../config.js';
import type { Cluster } from '../core/cluster.js';
import type { Caller } from '../core/deps.js';
import { overQuota, quotasOf } from '../core/quotas.js';
import { ShellbaseError, notFound } from '../errors.js';
import type { LeaseFence, MachineRow, MetadataStore, SnapshotRow, StoredMachineFiles } from '../store/metadata/types.js';
import { newId } from '../util/ids.js';
import type { MachineLayout } from './layout.js';
import type { MachineRun, RunHooks } from './run.js';
import type { MachineStowage } from './storage/stowage.js';

/** States in which a machine holds memory on the worker that runs it. */
const LIVE = new Set(['starting', 'running', 'paused']);
/** A wake is never refused by the quota (as in one process, where it checks only the host's room). */
const UNBOUNDED = 2 ** 31 - 1;

/** `runningMachines` slots taken for machines about to start: `bind` each to one, then `done`. */
export interface Reservation {
  bind(machineId: string): void;
  /** Gives back the slots no machine took (never rejects). */
  done(): Promise<void>;
}

/**
 * Machines across the workers of a cluster. A machine that holds memory runs on one worker, which
 * holds its lease (kind `machine`, key its id); calls that land elsewhere are passed there
 * (api/routing.ts). Hibernating stores its memory and disk in the object store
 * (machines/storage/stowage.ts) and gives the lease up, so the next call on any worker restores it there.
 * A machine whose lease-holder died while it held memory is `lost`; the lease's epoch fences its
 * row: a worker whose lease was taken over (taken for gone after a pause or a partition) writes
 * nothing more of it, and ends its QEMU when its heartbeat finds out. `runningMachines` is counted
 * over every live worker (a slot per machine holding memory, given back when it stops holding it).
 * The blobs of stored files are held by their machine or snapshot (`Cluster.holdBlobs`) from
 * before its row names them until it stops naming them or goes; then, unless something else
 * names them, collection deletes them after the grace period; a machine woken here keeps holding
 * the frozen files below its disk's top, which its next hibernation names again. (A frozen file stored before is
 * named again without packing when the store still has its blob: were that blob, named by nothing
 * for a whole grace period, deleted between the check and the hold, the row would name a missing
 * blob, as a layer packed again to the same bytes at that instant would.)
 *
 * Absent in the embedded default, where none of this happens.
 */
export class MachinePlacement {
  /** Machines whose lease this worker holds, and its epoch. */
  private readonly held = new Map<string, number>();
  /**
   * Machines whose lease another worker took over while this one held it, and the epoch it held:
   * until this worker has caught up with the store (`settle`), its writes of their rows are still
   * fenced by that epoch, so the database refuses them.
   */
  private readonly revoked = new Map<string, number>();
  /** Machines whose lease is held only for writes of their row (`leased`), and how many are under way. */
  private readonly borrowed = new Map<string, number>();
  /** Machines woken here: the digests of the frozen files below their disk's top, still held while they run. */
  private readonly frozen = new Map<string, string[]>();
  /** Machines this worker holds a `runningMachines` slot for, and their tenants. */
  private readonly slots = new Map<string, string>();
  private readonly takenListeners: ((id: string) => void)[] = [];
  private readonly lostListeners: ((id: string) => void)[] = [];

  constructor(private readonly cluster: Cluster, readonly stowage: MachineStowage, private readonly metadata: MetadataStore,
    private readonly layout: MachineLayout, private readonly config: ServerConfig) {
    cluster.leaseLost((kind, key) => {
      const epoch = kind === 'machine' ? this.held.get(key) : undefined;
      if (epoch === undefined) return;
      this.held.delete(key);
      this.revoked.set(key, epoch);
      this.frozen.delete(key);
      void this.free(key).catch(() => undefined);
      for (const l of this.lostListeners) l(key);
    });
  }

  /** Tells `listener` of each machine whose lease this worker takes (made, restored or woken here). */
  onTaken(listener: (id: string) => void): void { this.takenListeners.push(listener); }

  /**
   * Tells `listener` of each machine whose lease another worker took over while this one held it
   * (this worker was taken for gone): its row is that worker's now, and its process here must end.
   */
  onLost(listener: (id: string) => void): void { this.lostListeners.push(listener); }

  /** Whether this worker runs the machine now (holds its lease). */
  holds(id: string): boolean { return this.held.has(id); }

  /**
   * The lease as this worker holds it (or held it, until it caught up after losing it), to fence a
   * write of the machine's row; none when it holds none.
   */
  fence(id: string): LeaseFence | undefined {
    const epoch = this.held.get(id) ?? this.revoked.get(id);
    return epoch === undefined ? undefined : { kind: 'machine', key: id, worker: this.cluster.workerId, epoch };
  }

  /** The API and gateway of the live worker that runs the machine, when that is another one. */
  async elsewhere(id: string): Promise<{ api: string; gateway: string } | null> {
    if (this.held.has(id)) return null;
    return this.cluster.elsewhere('machine', id);
  }

  /**
   * Runs `write` (of the machine's row) fenced by its lease: the one this worker holds (or held and
   * lost: refused then), else one taken for the write and given back after. A worker that does not
   * run the machine (hibernated, stopped) thus writes its row under a lease too, and no other
   * worker can wake it meanwhile; one that runs it already makes this `unavailable`.
   */
  async leased<T>(id: string, write: (fence: LeaseFence) => Promise<T>): Promise<T> {
    const fence = this.fence(id);
    if (fence && !this.borrowed.has(id)) return write(fence);
    if (!fence) await this.acquire(id);
    // Writes at once share the lease; the last one to end gives it back.
    this.borrowed.set(id, (this.borrowed.get(id) ?? 0) + 1);
    try {
      return await write(this.fence(id)!);
    } finally {
      const left = (this.borrowed.get(id) ?? 0) - 1;
      // Unless a wake here made the lease its own meanwhile (`take`), it goes back. A failure to
      // give it back leaves the row to this worker, which takes it again the next time it is asked.
      if (left > 0) this.borrowed.set(id, left);
      else if (this.borrowed.delete(id) && this.held.delete(id)) await this.cluster.unclaim('machine', id).catch(() => undefined);
    }
  }

  /** Takes the machine's lease for this worker; `unavailable` when another live worker holds it. */
  async take(id: string): Promise<void> {
    // A lease held for writes (`leased`) becomes this worker's to keep.
    const borrowed = this.borrowed.delete(id);
    if (!this.held.has(id)) await this.acquire(id);
    else if (!borrowed) return;
    for (const l of this.takenListeners) l(id);
  }

  /** The machine's lease for this worker (no one told: `take` tells, `leased` does not). */
  private async acquire(id: string): Promise<void> {
    const won = await this.cluster.claim('machine', id);
    if (!won.mine) {
      throw new ShellbaseError('unavailable', `machine ${id} runs on another worker`, { details: { machine: id }, hint: 'retry: calls through the API are passed to the worker that runs it' });
    }
    this.held.set(id, won.epoch);
    this.revoked.delete(id);
  }

  /** Gives the machine's lease and slot back (it holds no memory here any more, or is deleted). */
  async forget(id: string): Promise<void> {
    await this.free(id);
    if (this.held.delete(id)) await this.cluster.unclaim('machine', id);
  }

  /** Takes `count` of the tenant's `runningMachines` slots, counted over every live worker (429 over it). */
  async reserve(caller: Pick<Caller, 'tenantId' | 'quotas'>, count: number): Promise<Reservation> {
    const { runningMachines } = quotasOf(this.config, caller);
    let left = 0;
    const giveBack = async () => { for (; left > 0; left--) await this.cluster.release(caller.tenantId, 'machine'); };
    for (let i = 0; i < count; i++) {
      if (!(await this.cluster.admit(caller.tenantId, 'machine', runningMachines))) {
        await giveBack().catch(() => undefined);
        throw overQuota('runningMachines', runningMachines, 'stop, hibernate or delete machines you do not need (idle ones hibernate by themselves); machines on every worker count');
      }
      left++;
    }
    return {
      bind: (id) => { if (left > 0) { left--; this.slots.set(id, caller.tenantId); } },
      // Never fails its caller (a create's clean-up): a slot the database did not get back is given back later (Cluster.release).
      done: () => giveBack().catch(() => undefined),
    };
  }

  /**
   * Brings a machine's row up to date on a worker that does not run it (another worker may have
   * moved it on since), and finds it lost when it held memory and no live worker holds its lease.
   * Without `readOnly`, a machine another live worker runs is `unavailable` here.
   */
  async settle(run: MachineRun, { readOnly = false }: { readOnly?: boolean } = {}): Promise<void> {
    if (this.held.has(run.row.id)) return;
    const fresh = await this.metadata.machines.get(run.row.tenantId, run.row.id);
    if (!fresh) throw notFound('machine', run.row.id);
    // A process of this worker's own is still ending, or a step of its own (a hibernation's
    // upload) is under way: its steps decide, fenced by the epoch this worker held.
    if (run.vm || run.busy) return;
    run.row = fresh;
    this.revoked.delete(fresh.id);
    if (!LIVE.has(fresh.state)) return;
    const there = await this.cluster.elsewhere('machine', fresh.id);
    if (there) {
      if (readOnly) return;
      throw new ShellbaseError('unavailable', `machine ${fresh.id} runs on another worker (${there.api})`, { details: { machine: fresh.id }, hint: 'call it through the API, which passes machine calls to that worker' });
    }
    // Its worker is gone, and its memory with it.
    await this.take(fresh.id);
    try {
      await run.serial(() => run.lose());
    } finally {
      await this.forget(fresh.id);
    }
  }

  /**
   * A machine's row was saved: the blobs of files it no longer names (a wake drops its stored
   * files, a hibernation replaces them) are let go; one that holds no memory gives its slot back,
   * and its lease once nothing here is needed to wake it.
   */
  async saved(row: MachineRow): Promise<void> {
    if (row.spec.stored || !(LIVE.has(row.state) || row.state === 'hibernated')) this.frozen.delete(row.id);
    await this.cluster.releaseBlobs(row.id, [...digestsOf(row.spec.stored), ...(this.frozen.get(row.id) ?? [])]);
    if (LIVE.has(row.state)) return;
    await this.free(row.id);
    if (row.state !== 'hibernated' || row.spec.stored) await this.forget(row.id);
  }

  /** What MachineRun asks of a cluster (machines/run.ts): stow on hibernation, unstow before a wake. */
  runHooks(log: Logger): Pick<RunHooks, 'stow' | 'unstow' | 'stowFailed'> {
    return {
      stow: (r, saved) => this.stow(r, saved),
      unstow: (r, saved) => this.unstow(r, saved),
      stowFailed: (r, err) => log.error({ err, machine: r.id }, 'storing a hibernated machine in the object store failed: it wakes only on this worker'),
    };
  }

  /** A machine's or snapshot's row was deleted: the blobs of its files go unless something else names them. */
  dropped(id: string): Promise<void> {
    this.frozen.delete(id);
    this.revoked.delete(id);
    return this.cluster.releaseBlobs(id, []);
  }

  /** A snapshot just taken here, stored in the object store too (before it is acknowledged): any worker restores it. */
  async storeSnapshot(snap: SnapshotRow): Promise<void> {
    const s = snap.spec;
    try {
      s.stored = await this.stowage.store({ ram: s.ram, state: s.state, disk: s.disk }, { frozenTop: true });
      await this.cluster.holdBlobs(snap.id, digestsOf(s.stored));
    } catch (e) {
      rmSync(path.dirname(s.state), { recursive: true, force: true });
      throw e;
    }
  }

  /** A snapshot with its files on this worker: its own, or fetched from the object store (once) when another worker took it. */
  async localSnapshot(snap: SnapshotRow): Promise<SnapshotRow> {
    const dir = this.layout.snapshotDir(snap.tenantId, snap.id);
    if (!snap.spec.stored || this.layout.snapshotFiles(dir).state === snap.spec.state) return snap;
    return { ...snap, spec: { ...snap.spec, ...(await this.stowage.fetchSnapshot(snap.spec.stored, dir)) } };
  }

  /** Hibernation: its memory and disk to the object store (this worker remembers which storing its own files are). */
  async stow(row: MachineRow, saved: { ram: string; state: string }): Promise<StoredMachineFiles> {
    const stored = await this.stowage.store({ ...saved, disk: row.spec.disk });
    await this.cluster.holdBlobs(row.id, digestsOf(stored));
    writeFileSync(this.marker(row.id), stored.id);
    return stored;
  }

  /**
   * Before a wake: the lease and a slot for this worker, and the machine's memory and disk here
   * (this worker's own files when it stored them last, else fetched from the object store).
   * Returns the row with its disk chain as it is here.
   */
  async unstow(row: MachineRow, saved: { ram: string; state: string }): Promise<MachineRow> {
    await this.take(row.id);
    try {
      if (!this.slots.has(row.id) && (await this.cluster.admit(row.tenantId, 'machine', UNBOUNDED))) this.slots.set(row.id, row.tenantId);
      // A lease taken over while the slot was being taken freed nothing (there was none yet):
      // the slot goes back here (below), and the wake is another worker's.
      if (!this.held.has(row.id)) {
        throw new ShellbaseError('unavailable', `machine ${row.id} was taken over by another worker while it was being woken here`,
          { details: { machine: row.id }, hint: 'retry: calls through the API are passed to the worker that runs it' });
      }
      const { stored, ...spec } = row.spec;
      if (!stored) return row;
      this.frozen.set(row.id, stored.disk.slice(1).map((f) => f.digest));
      const mine = existsSync(saved.ram) && existsSync(spec.disk[0]) && readMarker(this.marker(row.id)) === stored.id;
      if (mine) return { ...row, spec };
      rmSync(saved.ram, { force: true });
      const top = this.layout.diskFile(row.tenantId, `${row.id}-${newId('d')}`);
      const disk = await this.stowage.fetch(stored, { ...saved, top });
      return { ...row, spec: { ...spec, disk } };
    } catch (e) {
      await this.forget(row.id);
      throw e;
    }
  }

  private async free(id: string): Promise<void> {
    const tenantId = this.slots.get(id);
    if (tenantId === undefined) return;
    this.slots.delete(id);
    await this.cluster.release(tenantId, 'machine');
  }

  private marker(id: string): string { return path.join(this.layout.runDir(id), 'stored-id'); }
}

/** The blobs a machine's or snapshot's stored files are (none when it has none). */
function digestsOf(stored: StoredMachineFiles | undefined): string[] {
  return stored ? [...new Set([stored.ram.digest, stored.state.digest, ...stored.disk.map((f) => f.digest)])] : [];
}

function readMarker(file: string): string | null {
  try { return readFileSync(file, 'utf8'); } catch { return null; }
}
