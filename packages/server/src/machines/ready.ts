import { rmSync } from 'node:fs';
import type { Logger } from 'pino';
import type { MachinesConfig } from '../config.js';
import type { Egress, EgressSession } from '../net/egress.js';
import { newId } from '../util/ids.js';
import type { Agent } from './agent.js';
import { overlay } from './disk.js';
import type { MachineHost } from './host.js';
import type { QemuVm } from './qemu.js';
import { restoreVm } from './restore.js';
import type { Template, Templates } from './templates.js';

/**
 * A machine restored from a template ahead of the create that takes it: no row yet, its CPUs
 * stopped, its guest settled once and through a first `bash` (so TCG has that code translated),
 * its egress session refusing everything until the machine's policy is given.
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
  vm: QemuVm;
  agent: Agent;
  session: EgressSession;
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
  making: number;
  /** Bumped by `dropAll`: a VM whose making began before is discarded once made. */
  epoch: number;
}

/** How often templates gone cold are looked for. */
const SWEEP_MS = 5_000;

/**
 * Ready VMs per hot template (SHELLBASE_MACHINES_READY of them; 0: none). A template is hot for
 * `readyIdleMs` after a create used it; then its ready VMs end. Each ready VM is one machine's
 * (its id, tenant and disk are fixed when it is made) and is taken once. A ready VM is made only
 * where the host has room for it and one more machine of its size, counts against the host's
 * caps as a machine does (`held`), and gives its room up when a start needs it (`dropAll`).
 * They live in this process only: a server's start removes what a crash left of them.
 */
export class ReadyPool {
  private readonly hot = new Map<string, Hot>();
  private readonly timer: NodeJS.Timeout;
  private closed = false;
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

  private static key(tenantId: string, tpl: Template): string { return `${tenantId}\n${tpl.dir}`; }

  /** A ready VM of `tenantId` for `tpl` (the caller now owns it and calls its `release`), or null. */
  take(tenantId: string, tpl: Template): ReadyVm | null {
    const hot = this.hot.get(ReadyPool.key(tenantId, tpl));
    const vm = hot?.ready.shift() ?? null;
    if (vm) this.counts.taken++; else this.counts.missed++;
    return vm;
  }

  /** A create used `tpl` for `tenantId`: the template is hot from now, and its ready VMs are made again. */
  used(tenantId: string, tpl: Template, memoryMb: number, cpus: number): void {
    if (this.closed || this.o.config.readyPerTemplate === 0) return;
    const key = ReadyPool.key(tenantId, tpl);
    let hot = this.hot.get(key);
    if (!hot) {
      hot = { tenantId, template: tpl, memoryMb, cpus, lastUsed: 0, ready: [], making: 0, epoch: 0 };
      this.hot.set(key, hot);
    }
    hot.lastUsed = Date.now();
    this.fill(key, hot);
  }

  /** Ready VMs, and those being made, with their memory: what admission counts as held. */
  get held(): { count: number; memoryMb: number } {
    let count = 0;
    let memoryMb = 0;
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
   * Every ready VM ends (a start needs their room): out of the pool and its count at once, their
   * processes end meanwhile (those being made, as soon as they are).
   */
  dropAll(): void {
    for (const h of this.hot.values()) {
      for (const r of h.ready.splice(0)) void this.discard(r);
      h.making = 0;
      h.epoch++;
    }
  }

  /** Server shutdown: nothing more is made, and every ready VM ends. */
  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.timer);
    const all = [...this.hot.values()].flatMap((h) => h.ready.splice(0));
    this.hot.clear();
    await Promise.all(all.map((r) => this.discard(r)));
  }

  /** A ready VM not taken: its process, session and files end. */
  async discard(r: ReadyVm): Promise<void> {
    r.release();
    await r.vm.kill().catch(() => undefined);
    r.agent.close();
    await r.session.close().catch(() => undefined);
    const { layout } = this.o.host;
    for (const f of [layout.ramFile(r.id), r.disk]) rmSync(f, { force: true });
    rmSync(layout.runDir(r.id), { recursive: true, force: true });
  }

  private fill(key: string, hot: Hot): void {
    while (!this.closed && this.hot.get(key) === hot && hot.ready.length + hot.making < this.o.config.readyPerTemplate && this.o.room(hot.memoryMb)) {
      const epoch = hot.epoch;
      hot.making++;
      this.make(hot).then((r) => {
        if (hot.epoch !== epoch) { void this.discard(r); return; }
        hot.making--;
        if (this.closed || this.hot.get(key) !== hot) void this.discard(r);
        else hot.ready.push(r);
      }, (err: unknown) => {
        if (hot.epoch === epoch) hot.making--;
        this.o.log.warn({ err, template: hot.template.dir }, 'a ready machine could not be made');
      });
    }
  }

  private async make(hot: Hot): Promise<ReadyVm> {
    const { host, egress, templates } = this.o;
    const { tenantId, template: tpl, memoryMb, cpus } = hot;
    const id = newId('m');
    const release = templates.hold(tpl.dir);
    host.disksDir(tenantId);
    const disk = host.layout.diskFile(tenantId, `${id}-${newId('d')}`);
    let session: EgressSession | null = null;
    try {
      await overlay(tpl.disk, disk);
      session = await egress.ahead(host.uid);
      const spec = { memoryMb, cpus, disk: [disk, tpl.disk], ports: [], ...(tpl.ramPadKb ? { ramPadKb: tpl.ramPadKb } : {}) };
      const { vm, agent } = await restoreVm(host, { id, tenantId, spec }, { ram: tpl.ram, state: tpl.state, readable: [tpl.dir] }, session.socket);
      const r: ReadyVm = { id, tenantId, template: tpl, memoryMb, cpus, disk, vm, agent, session, release };
      try {
        const warm = await agent.run({ argv: ['bash', '-c', 'true'], timeoutMs: 30_000, outputBytes: 1024 });
        if (warm.exitCode !== 0) throw new Error(`a first command in the ready machine failed: ${warm.stderr.toString().trim()}`);
        await vm.stop();
      } catch (e) {
        await this.discard(r);
        throw e;
      }
      return r;
    } catch (e) {
      release();
      await session?.close().catch(() => undefined);
      rmSync(disk, { force: true });
      rmSync(host.layout.runDir(id), { recursive: true, force: true });
      throw e;
    }
  }

  /** Templates no create used for `readyIdleMs` are no longer hot: their ready VMs end. */
  private sweep(): void {
    const now = Date.now();
    for (const [key, hot] of this.hot) {
      if (now - hot.lastUsed < this.o.config.readyIdleMs) continue;
      this.hot.delete(key);
      for (const r of hot.ready.splice(0)) void this.discard(r);
    }
  }
}
