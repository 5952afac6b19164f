import { rmSync } from 'node:fs';
import type { Logger } from 'pino';
import type { MachinesConfig } from '../../config.js';
import type { Egress, EgressSession } from '../../net/egress.js';
import { newId } from '../../util/ids.js';
import type { MachineHost } from '../host.js';
import type { Vm } from '../vm/types.js';
import { restoreVm, templateSource } from './restore.js';
import type { Template, Templates } from './templates.js';

/**
 * A machine restored from a template ahead of the create that takes it: no row yet, its CPUs
 * stopped, its guest settled once and through a first `bash` (so TCG has that code translated),
 * its egress session (where the backend's guests have a network) refusing everything until the
 * machine's policy is given.
 */
export interface ReadyVm {
  /** The id its machine gets (its RAM file and run directory are named by it, its disk too). */
  id: string;
  tenantId: string;
  template: Template;
  memoryMb: number;
  cpus: number;
  /** The writable top of its disk (in the tenant's disk directory), over the template's. */
  disk: string;
  vm: Vm;
  /** Its egress session (a networked backend's; null otherwise). */
  session: EgressSession | null;
  /** Lets its template be collected again (called when the VM is taken or discarded). */
  release: () => void;
}

/** One hot template of one tenant: when a create last used it, and what is ready or being made for it. */
interface Hot {
  tenantId: string;
  template: Template;
  memoryMb: number;
  cpus: number;
  lastUsed: number;
  ready: ReadyVm[];
  /** VMs being made (whatever their epoch): they hold memory until made and handed out or discarded. */
  making: number;
  /** Bumped by `dropAll`: a VM whose making began before is discarded (its making stops at its next step). */
  epoch: number;
}

/** How often templates gone cold are looked for. */
const SWEEP_MS = 5_000;

/** A making stopped on purpose (the pool closed, or `dropAll`): not worth a warning. */
class Abandoned extends Error {}

/**
 * Ready VMs per hot template (SHELLBASE_MACHINES_READY of them; 0: none). A template is hot for
 * `readyIdleMs` after a create used it; then its ready VMs end. Each ready VM is one machine's
 * (its id, tenant and disk are fixed when it is made) and is taken once. A ready VM is made only
 * where the host has room for it and one more machine of its size, counts against the host's
 * caps as a machine does (`held`: ready, being made, or ending), and gives its room up when a
 * start needs it (`dropAll`). They live in this process only: a server's start removes what a
 * crash left of them.
 */
export class ReadyPool {
  private readonly hot = new Map<string, Hot>();
  private readonly timer: NodeJS.Timeout;
  private closed = false;
  /** Makings under way (each up to its VM handed out or discarded). */
  private readonly inflight = new Set<Promise<void>>();
  /** VMs being discarded: their memory is held until their QEMU has ended. */
  private readonly dying = { count: 0, memoryMb: 0 };
  private readonly discarding = new Set<Promise<void>>();
  /** VMs taken and not yet a machine's run (`handed`) or back (`putBack`), with the epoch they were taken in. */
  private readonly lent = new Map<ReadyVm, number>();
  /** Starts waiting in `dropAll` for room: nothing is made meanwhile. */
  private blocked = 0;
  /** Ready VMs taken by creates, and creates that found none (tests and metrics read them). */
  readonly counts = { taken: 0, missed: 0 };

  constructor(private readonly o: {
    host: MachineHost;
    egress: Egress;
    templates: Templates;
    config: MachinesConfig;
    log: Logger;
    /** Whether the host has room for a ready VM of `memoryMb` and one more machine of that size, on top of its machines and `held`. */
    room: (memoryMb: number) => boolean;
  }) {
    this.timer = setInterval(() => this.sweep(), SWEEP_MS).unref();
  }

  private static key(tenantId: string, templateDir: string): string { return `${tenantId}\n${templateDir}`; }

  /**
   * A ready VM of `tenantId` for the template in `templateDir` (the caller now owns it: it goes to
   * `start`, or back with `putBack`), or null. One whose QEMU ended meanwhile is discarded.
   */
  take(tenantId: string, templateDir: string): ReadyVm | null {
    const hot = this.hot.get(ReadyPool.key(tenantId, templateDir));
    let vm: ReadyVm | null = null;
    while (hot && !vm) {
      const next = hot.ready.shift();
      if (!next) break;
      if (next.vm.alive) vm = next; else this.discardSoon(next);
    }
    if (vm) { this.counts.taken++; this.lent.set(vm, hot!.epoch); } else this.counts.missed++;
    return vm;
  }

  /** A VM `take` gave is a machine's now (or is being discarded as one): no longer the pool's to count. */
  handed(r: ReadyVm): void { this.lent.delete(r); }

  /**
   * A VM `take` gave that its create did not use (it was refused): ready again, unless the pool
   * dropped its VMs meanwhile, has its count already, or it died.
   */
  putBack(r: ReadyVm): void {
    const epoch = this.lent.get(r);
    this.lent.delete(r);
    this.counts.taken--;
    this.counts.missed++;
    const hot = this.hot.get(ReadyPool.key(r.tenantId, r.template.dir));
    if (this.closed || !hot || hot.epoch !== epoch || !r.vm.alive || hot.ready.length + hot.making >= this.o.config.readyPerTemplate) this.discardSoon(r);
    else hot.ready.unshift(r);
  }

  /** A create used `tpl` for `tenantId`: the template is hot from now, and its ready VMs are made again. */
  used(tenantId: string, tpl: Template, memoryMb: number, cpus: number): void {
    if (this.closed || this.o.config.readyPerTemplate === 0) return;
    const key = ReadyPool.key(tenantId, tpl.dir);
    let hot = this.hot.get(key);
    if (!hot) {
      hot = { tenantId, template: tpl, memoryMb, cpus, lastUsed: 0, ready: [], making: 0, epoch: 0 };
      this.hot.set(key, hot);
    }
    hot.lastUsed = Date.now();
    this.fill(key, hot);
  }

  /**
   * Ready VMs, those being made, taken (not yet a machine's run) and ending, with their memory:
   * what admission counts as held. `own`: the VM the asking create took (it needs no more room).
   */
  held(own?: ReadyVm | null): { count: number; memoryMb: number } {
    let { count, memoryMb } = this.dying;
    for (const r of this.lent.keys()) {
      if (r === own) continue;
      count++;
      memoryMb += r.memoryMb;
    }
    for (const h of this.hot.values()) {
      const n = h.ready.length + h.making;
      count += n;
      memoryMb += n * h.memoryMb;
    }
    return { count, memoryMb };
  }

  /** VMs ready to be taken. */
  get waiting(): number {
    let n = 0;
    for (const h of this.hot.values()) n += h.ready.length;
    return n;
  }

  /**
   * Every ready VM ends (a start needs their room), and every making stops at its next step;
   * resolves once all of their QEMUs have ended, so `held` is then what is left.
   */
  async dropAll(): Promise<void> {
    this.blocked++;
    try {
      for (const h of this.hot.values()) {
        h.epoch++;
        for (const r of h.ready.splice(0)) this.discardSoon(r);
      }
      await Promise.allSettled([...this.discarding, ...this.inflight]);
    } finally {
      this.blocked--;
    }
  }

  /** Server shutdown: nothing more is made, and every ready VM ends (makings under way stop and are waited for). */
  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.timer);
    await this.dropAll();
    this.hot.clear();
  }

  /** A ready VM not taken: its process, session and files end. */
  discard(r: ReadyVm): Promise<void> {
    this.lent.delete(r);
    const p = this.end(r).finally(() => this.discarding.delete(p));
    this.discarding.add(p);
    return p;
  }

  private async end(r: ReadyVm): Promise<void> {
    this.dying.count++;
    this.dying.memoryMb += r.memoryMb;
    try {
      r.release();
      await r.vm.kill().catch(() => undefined);
      await r.session?.close().catch(() => undefined);
      const { layout } = this.o.host;
      for (const f of [layout.ramFile(r.id), r.disk]) rmSync(f, { force: true });
      rmSync(layout.runDir(r.id), { recursive: true, force: true });
    } finally {
      this.dying.count--;
      this.dying.memoryMb -= r.memoryMb;
    }
  }

  private discardSoon(r: ReadyVm): void {
    this.discard(r).catch((err: unknown) => this.o.log.warn({ err, machine: r.id }, 'a ready machine\'s files could not all be removed'));
  }

  private fill(key: string, hot: Hot): void {
    while (!this.closed && this.blocked === 0 && this.hot.get(key) === hot && hot.ready.length + hot.making < this.o.config.readyPerTemplate && this.o.room(hot.memoryMb)) {
      const epoch = hot.epoch;
      hot.making++;
      const made = this.make(hot, epoch).then(
        (r) => {
          if (this.closed || hot.epoch !== epoch || this.hot.get(key) !== hot) return this.discard(r);
          hot.ready.push(r);
        },
        (err: unknown) => { if (!(err instanceof Abandoned)) this.o.log.warn({ err, template: hot.template.dir }, 'a ready machine could not be made'); },
      ).catch((err: unknown) => this.o.log.warn({ err, template: hot.template.dir }, 'a ready machine\'s files could not all be removed'))
        .finally(() => { hot.making--; this.inflight.delete(made); });
      this.inflight.add(made);
    }
  }

  /** Restores a VM for `hot`, runs a first `bash` in it and stops it; stops early (`Abandoned`) once the pool closes or `dropAll` runs. */
  private async make(hot: Hot, epoch: number): Promise<ReadyVm> {
    const { host, egress, templates } = this.o;
    const { tenantId, template: tpl, memoryMb, cpus } = hot;
    const goOn = () => { if (this.closed || hot.epoch !== epoch) throw new Abandoned('the ready machine is no longer wanted'); };
    const id = newId('m');
    const release = templates.hold(tpl.dir);
    const disk = host.layout.diskFile(tenantId, `${id}-${newId('d')}`);
    let session: EgressSession | null = null;
    try {
      host.disksDir(tenantId);
      await host.backend.overlay(tpl.disk, disk);
      goOn();
      if (host.backend.networked) session = await egress.ahead(host.uid);
      goOn();
      const spec = { memoryMb, cpus, disk: [disk, tpl.disk], ports: [], ...(tpl.ramPadKb ? { ramPadKb: tpl.ramPadKb } : {}), guestEnv: tpl.env };
      const vm = await restoreVm(host, { id, tenantId, spec }, templateSource(tpl), session?.socket ?? null, goOn);
      const r: ReadyVm = { id, tenantId, template: tpl, memoryMb, cpus, disk, vm, session, release };
      try {
        goOn();
        const warm = await vm.agent.run({ argv: ['bash', '-c', 'true'], timeoutMs: 30_000, outputBytes: 1024 });
        if (warm.exitCode !== 0) throw new Error(`a first command in the ready machine failed: ${warm.stderr.toString().trim()}`);
        await vm.pause();
      } catch (e) {
        await this.discard(r);
        throw e;
      }
      return r;
    } catch (e) {
      release();
      await session?.close().catch(() => undefined);
      for (const f of [disk, host.layout.ramFile(id)]) rmSync(f, { force: true });
      rmSync(host.layout.runDir(id), { recursive: true, force: true });
      throw e;
    }
  }

  /** Templates no create used for `readyIdleMs` are no longer hot: their ready VMs end (once none is being made). */
  private sweep(): void {
    const now = Date.now();
    for (const [key, hot] of this.hot) {
      if (now - hot.lastUsed < this.o.config.readyIdleMs || hot.making > 0) continue;
      this.hot.delete(key);
      for (const r of hot.ready.splice(0)) this.discardSoon(r);
    }
  }
}
