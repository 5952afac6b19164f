import { mkdirSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { runOk } from '../../util/proc.js';
import { overlay } from '../storage/disk.js';
import type { Cgroup } from '../../runtime/index.js';
import { runFiles } from '../layout.js';
import { QemuVm } from './qemu.js';
import { QmpError } from './qmp.js';
import { LiveCopyError } from './types.js';

/**
 * The pause QEMU aims for (its `downtime-limit`, ms): it stops the source once the pages still
 * dirty can be sent within it. A guest that dirties memory faster than it is copied never gets
 * there, so the limit grows with the passes over memory: [from pass, limit].
 */
export const DOWNTIME_BY_PASS: ReadonlyArray<readonly [pass: number, limitMs: number]> = [[1, 10], [4, 30], [6, 100], [8, 300], [10, 2000], [12, 20_000]];

/**
 * Whether this host's QEMU marks every page a running guest writes, which a live copy relies on.
 * Under KVM the kernel does. Under TCG, QEMU before 9.0 does not on its fast path: syncing the
 * dirty bitmap a word at a time clears bits without resetting the TLB entries that let the
 * guest's writes through unmarked (fixed in 9.0, "physmem: Fix migration dirty bitmap coherency
 * with TCG memory access"). Measured with 7.2 here: after a completed copy of a 512 MiB guest,
 * 21-44 pages differed between the stopped source and its copy, and 4 forks in 5 crashed.
 */
export function tracksEveryWrite(accel: 'kvm' | 'tcg', qemuBuild: string): boolean {
  if (accel === 'kvm') return true;
  const m = /version (\d+)\./.exec(qemuBuild);
  return m !== null && Number(m[1]) >= 9;
}

/**
 * KiB a machine's RAM gets past its MiB where the host's QEMU does not track every write: a RAM
 * block whose size is not a whole number of 256 KiB is synced page by page, a path that does
 * reset the TLB (QEMU 7.2 here: 0 pages differed in 4 copies of a guest rewriting 64 MiB at
 * random, against 30-44 without). Recorded in templates and machines' specs (`ramPadKb`): a
 * saved state restores only into RAM of its own size.
 */
export function ramPadKb(accel: 'kvm' | 'tcg', qemuBuild: string): number {
  return tracksEveryWrite(accel, qemuBuild) ? 0 : 8;
}

/** Whether a live copy of a machine with `padKb` of RAM past its MiB is sound on this host. */
export function liveCopySound(accel: 'kvm' | 'tcg', qemuBuild: string, padKb: number): boolean {
  return tracksEveryWrite(accel, qemuBuild) || padKb > 0;
}

/**
 * Whether a running machine's freeze copies its memory live. Never where the copy would not be
 * `sound`; `on` and `off` say so; `auto` copies live unless a stopped copy of the `usedMiB` its
 * RAM file holds is expected to pause it no longer than `pauseMs` (`rate.pauseMs`: what this
 * host's stopped copies have cost, with room for their spread).
 */
export function copiesLive(setting: 'auto' | 'on' | 'off', usedMiB: number, rate: CopyRate, pauseMs: number, sound: boolean): boolean {
  if (!sound || setting === 'off') return false;
  return setting === 'on' || rate.pauseMs(usedMiB) > pauseMs;
}

/** What a stopped copy costs per MiB of RAM in use on this host, from the copies made so far. */
export class CopyRate {
  /** Before any copy: the rate measured on a 2-vCPU VM under TCG (docs/performance.md). */
  msPerMiB = 0.8;

  /**
   * A stopped copy's pause of a machine with `usedMiB` in its RAM file, estimated high: stopped
   * copies of one machine on one host paused it up to ~25% apart (the RAM file's copy, the device
   * state and `cont` each vary), so a copy is taken as 1.25 times the rate's.
   */
  pauseMs(usedMiB: number): number {
    return usedMiB * this.msPerMiB * 1.25;
  }

  /** A stopped copy of `usedMiB` paused the machine `ms`; copies too small to tell are ignored. */
  note(ms: number, usedMiB: number): void {
    if (usedMiB < 32 || !(ms > 0)) return;
    this.msPerMiB = 0.7 * this.msPerMiB + 0.3 * (ms / usedMiB);
  }
}

/** Punches the zero pages of a RAM file out (into holes: no memory in a tmpfs). */
export async function sparsify(ram: string): Promise<void> {
  await runOk('fallocate', ['--dig-holes', ram]);
}

/** MiB of a RAM file's pages in use (allocated in the tmpfs; its holes are pages the guest never touched). */
export function usedMiB(ram: string): number {
  return (statSync(ram).blocks * 512) / 2 ** 20;
}

export interface LiveCopy {
  /** The receiver's run directory (made here, removed after): its sockets, console log and throw-away disk. */
  dir: string;
  /** Where the copy's RAM goes: a file the receiver maps shared. */
  ram: string;
  /** Where the copy's device state goes (written without RAM, as a stopped freeze writes it). */
  state: string;
  /** The top of the source's disk chain; the receiver's disk is a throw-away overlay of it. */
  top: string;
  /** Directories of the chain's files (the receiver reads them; the source's own launch list may name ones gone since). */
  readable: string[];
  /** Runs while the source is stopped for the last pages (the disk is frozen here, at the same instant). */
  atSwitchover: () => Promise<void>;
  /** Runs once the source runs again (its row is saved here: it writes to the new overlay). */
  resumed: () => Promise<void>;
}

/** What a live copy needs of the host: files handed to QEMU's uid, and a cgroup for the receiving QEMU. */
export interface LiveCopyHost {
  give(file: string): void;
  cgroup(memoryMb: number, cpus: number): Cgroup;
}

/**
 * Copies a running QEMU's memory and device state while its guest runs, so the source pauses
 * only for the last dirty pages and its device state: QEMU's precopy migration to a receiving
 * QEMU started with the source's command line (its RAM mapped shared from `ram`, `-S` so it
 * never runs the guest), passes over the pages the guest dirtied until the rest fits the
 * downtime limit, then `pause-before-switchover` holds the stopped source while `atSwitchover`
 * runs, device state follows, and the source runs again. The receiver then saves its device
 * state without RAM (x-ignore-shared) and quits: the same two files a stopped freeze makes.
 * Returns the source's pause (ms), from QEMU's own STOP and RESUME events.
 *
 * The first pass reads every page of the source's RAM, so the source's RAM file is wholly
 * allocated from then on (its reservation already counts all of it). The copy's pages that
 * stayed zero are punched out of `ram` before this returns.
 */
export async function copyLive(host: LiveCopyHost, source: QemuVm, o: LiveCopy): Promise<number> {
  try {
    return await copy(host, source, o);
  } catch (e) {
    throw new LiveCopyError(`the live copy failed: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
  }
}

async function copy(host: LiveCopyHost, source: QemuVm, o: LiveCopy): Promise<number> {
  rmSync(o.dir, { recursive: true, force: true });
  mkdirSync(o.dir, { mode: 0o700 });
  host.give(o.dir);
  writeFileSync(o.ram, '');
  host.give(o.ram);
  const disk = path.join(o.dir, 'disk.qcow2');
  const socket = path.join(o.dir, 'in.sock');
  const s = source.spec;
  let receiver: QemuVm | null = null;
  let stopAt = 0;
  let resumeAt = 0;
  let limit = DOWNTIME_BY_PASS[0][1];
  const timers: NodeJS.Timeout[] = [];
  /** Rejects after `ms`: a copy that stalls (a receiver that stops reading) is cancelled. */
  const deadline = (ms: number, what: string) => new Promise<never>((_, reject) => {
    timers.push(setTimeout(() => reject(new QmpError(`no ${what} after ${ms} ms`)), ms));
  });
  const status = new StatusWatch();
  const unlisten = source.qmp.listen((name, data, at) => {
    const d = (data ?? {}) as { status?: unknown; pass?: unknown };
    if (name === 'STOP') stopAt = at;
    else if (name === 'RESUME') resumeAt = at;
    else if (name === 'MIGRATION' && typeof d.status === 'string') status.see(d.status);
    else if (name === 'MIGRATION_PASS') {
      const step = DOWNTIME_BY_PASS.find(([pass]) => pass === d.pass);
      if (step && step[0] > 1) {
        limit = step[1];
        void source.qmp.execute('migrate-set-parameters', { 'downtime-limit': limit }).catch(() => undefined);
      }
    }
  });
  let migrating = false;
  try {
    await overlay(o.top, disk);
    host.give(disk);
    receiver = await QemuVm.launch({
      ...s, ram: o.ram, disk, runDir: o.dir, incoming: socket, paused: true,
      readable: o.readable, writable: [o.dir, o.ram],
      egress: { forward: s.egress.forward, socket: path.join(o.dir, 'no-egress.sock') },
      cgroup: host.cgroup(s.memoryMb, 1),
    });
    await receiver.setCapabilities({ 'x-ignore-shared': false });
    await receiver.qmp.execute('migrate-incoming', { uri: `unix:${socket}` });
    await source.setCapabilities({ 'x-ignore-shared': false, 'pause-before-switchover': true, events: true });
    await source.qmp.execute('migrate-set-parameters', { 'max-bandwidth': 10_000_000_000, 'downtime-limit': DOWNTIME_BY_PASS[0][1] });
    await source.qmp.execute('migrate', { uri: `unix:${socket}` });
    migrating = true;
    // Either QEMU ending fails the copy (the receiver's end fails the source's migration too).
    const ended = (vm: QemuVm, who: string) => vm.exited.then((why) => { throw new QmpError(`the live copy's ${who} QEMU ended: ${why}`); });
    const eitherEnded = Promise.race([ended(source, 'source'), ended(receiver, 'receiving')]);
    const reach = (want: string, ms: number) => Promise.race([status.reach(want), eitherEnded, deadline(ms, want)]);
    // The passes move every page at least once: minutes for the largest machines under TCG.
    await reach('pre-switchover', 120_000 + s.memoryMb * 100);
    const stopped = performance.now();
    await o.atSwitchover();
    await source.qmp.execute('migrate-continue', { state: 'pre-switchover' });
    // The source is stopped until then: the last pages (within the downtime limit) and device state, or a cancel that lets it run.
    await reach('completed', limit + 30_000);
    migrating = false;
    await contAfterMigration(source);
    await o.resumed();
    // QEMU's own times of the stop and the resume; failing those, from the stopped source's report on.
    const pauseMs = resumeAt && stopAt ? resumeAt - stopAt : performance.now() - stopped;
    const state = runFiles(o.dir).frozenState;
    const rx = receiver;
    await Promise.race([(async () => { await rx.migration(); await rx.saveState(state); })(), ended(rx, 'receiving'), deadline(120_000, 'state from the receiver')]);
    await receiver.quit();
    renameSync(state, o.state);
    // The receiver read every zero page the source sent, which allocates it in a tmpfs.
    await sparsify(o.ram);
    return pauseMs;
  } catch (e) {
    if (migrating) {
      await source.qmp.execute('migrate_cancel').catch(() => undefined);
      await source.migration().catch(() => undefined);
    }
    // Whatever stage it failed at, the source goes on running.
    const st = await source.qmp.execute<{ status: string }>('query-status').catch(() => null);
    if (st && st.status !== 'running') await contAfterMigration(source).catch(() => undefined);
    await receiver?.kill();
    rmSync(o.ram, { force: true });
    throw e;
  } finally {
    unlisten();
    for (const t of timers) clearTimeout(t);
    status.end();
    await source.setCapabilities({ 'x-ignore-shared': true, 'pause-before-switchover': false, events: false }).catch(() => undefined);
    rmSync(o.dir, { recursive: true, force: true });
  }
}

/**
 * `cont` on a QEMU whose outgoing migration ended: QEMU reports `completed` a moment before it
 * leaves `finish-migrate`, and refuses `cont` until then ("Migration is not finalized yet").
 */
async function contAfterMigration(vm: QemuVm): Promise<void> {
  for (let i = 0; ; i++) {
    try {
      await vm.cont();
      return;
    } catch (e) {
      if (i >= 2000 || !(e instanceof QmpError) || !/not finalized/i.test(e.message)) throw e;
      await new Promise((r) => setTimeout(r, 1));
    }
  }
}

/** The source's migration status as its MIGRATION events tell it; `reach` fails on failed or cancelled. */
class StatusWatch {
  private seen = new Set<string>();
  private waiting: { want: string; resolve(): void; reject(e: Error): void } | null = null;

  see(status: string): void {
    this.seen.add(status);
    this.check();
  }

  reach(want: string): Promise<void> {
    return new Promise((resolve, reject) => {
      this.waiting = { want, resolve, reject };
      this.check();
    });
  }

  end(): void { this.waiting?.reject(new QmpError('the live copy ended')); this.waiting = null; }

  private check(): void {
    const w = this.waiting;
    if (!w) return;
    if (this.seen.has(w.want)) { this.waiting = null; w.resolve(); return; }
    const bad = ['failed', 'cancelled'].find((b) => this.seen.has(b));
    if (bad) { this.waiting = null; w.reject(new QmpError(`the live copy's migration ${bad}`)); }
  }
}
