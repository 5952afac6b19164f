import { createHash } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readdirSync, renameSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { Logger } from 'pino';
import type { Snapshotter } from '../../store/snapshotter/types.js';
import { Agent } from '../vm/agent.js';
import { buildDisk, copySparse, overlay } from '../storage/disk.js';
import type { MachineHost } from '../host.js';
import { MACHINE_TYPE, QemuVm, consoleTail, qemuBuild } from '../vm/qemu.js';
import { ramPadKb } from '../vm/live-copy.js';
import { PRUNED } from '../storage/commit.js';
import { removeTree } from '../../util/remove.js';
import type { TrustLayers, TrustOverlay } from '../../trust/index.js';

/** Bump when what a template holds or how it is made changes (4: the kernel layer on its disk). */
const TEMPLATE_FORMAT = 4;
/** A TCG boot of Debian with systemd takes ~40 s here; KVM a few. */
const BOOT_TIMEOUT_MS = 300_000;

/**
 * Run in the template's guest before it is frozen: the paths of the booted
 * disk (sorted, NUL-separated) and a time stamp. A machine's commit sends what
 * changed after the stamp and what of the list is gone (machines/storage/commit.ts).
 */
export const RECORD_BASE = `set -e
mkdir -p /var/lib/shellbase
find / -xdev -mindepth 1 \\( ${PRUNED} \\) -prune -o -print0 | LC_ALL=C sort -z > /var/lib/shellbase/base.list
touch /var/lib/shellbase/stamp
sync`;

/** A template's directory and the host's authorities its disk has (Templates.resolve). */
export interface ResolvedTemplate {
  dir: string;
  trust: TrustOverlay | null;
}

/** A booted machine frozen once systemd was up: every machine of its source starts here. */
export interface Template {
  dir: string;
  /** Frozen top of its disk chain (a qcow2 over `base.raw`). */
  disk: string;
  ram: string;
  state: string;
  /** KiB of RAM past its MiB (machines/vm/live-copy.ts `ramPadKb`): its machines restore into RAM of that size. */
  ramPadKb: number;
  /** Variables its machines' commands get (the host's authorities on its disk: trust/); empty when none. */
  env: Record<string, string>;
}

export interface TemplateSource {
  /** Where to keep it: the cache for images (shared by every tenant), the tenant's directory for versions. */
  root: string;
  /** The layers of the image or version, bottom first. */
  layers: readonly string[];
  memoryMb: number;
  cpus: number;
}

/**
 * Templates, built the first time a source (image or version) and size is
 * used: make the disk, boot it, wait until systemd says the system is up,
 * then save RAM, device state and disk. Built in a `.building` directory and
 * renamed into place, so a crash never leaves one that looks complete.
 */
export class Templates {
  private readonly building = new Map<string, Promise<Template>>();
  /** Templates handed out whose machine may not have its metadata row yet (never collected). */
  private readonly held = new Map<string, number>();

  /** `trust`: the host's authorities, stacked on every template's disk (a change of them makes new templates). */
  constructor(private readonly host: MachineHost, private readonly layers: Snapshotter, private readonly log: Logger, private readonly trust?: TrustLayers) {}

  /**
   * Where the template of `src` is (or will be once built) and the host's authorities on its disk,
   * read once: a change of the host's set between two reads would name one template and build another.
   */
  async resolve(src: TemplateSource): Promise<ResolvedTemplate> {
    const trust = (await this.trust?.forLayers(src.layers)) ?? null;
    return { dir: path.join(src.root, await this.key(src, trust)), trust };
  }

  private async key(src: TemplateSource, trust: TrustOverlay | null): Promise<string> {
    const { assets, accel, guest } = this.host;
    const pad = await this.ramPadKb();
    return createHash('sha256').update(JSON.stringify({
      format: TEMPLATE_FORMAT, layers: src.layers, assets: assets.tag, guest: guest.hash, qemu: await qemuBuild(), type: MACHINE_TYPE,
      accel: accel.accel, memoryMb: src.memoryMb, cpus: src.cpus, ...(pad ? { ramPadKb: pad } : {}), ...(trust ? { trust: trust.key } : {}),
    })).digest('hex').slice(0, 16);
  }

  /** The RAM pad this host's templates (and so their machines) get. */
  private async ramPadKb(): Promise<number> {
    return ramPadKb(this.host.accel.accel, await qemuBuild());
  }

  /**
   * Runs `fn` with the template for `src` (where `resolve` put it), building it now if there is
   * none (one build per key at a time; a failed build goes to `failed`). The template counts as
   * used now, and is not collected while `fn` runs.
   */
  async use<T>(src: TemplateSource, at: ResolvedTemplate, fn: (tpl: Template) => Promise<T>, failed: (e: Error) => never): Promise<T> {
    const { dir, trust } = at;
    const release = this.hold(dir);
    try {
      return await fn(await this.get(dir, src, await this.ramPadKb(), trust).catch(failed));
    } finally {
      release();
    }
  }

  /** Keeps the template in `dir` from being collected until the returned function is called (once). */
  hold(dir: string): () => void {
    this.held.set(dir, (this.held.get(dir) ?? 0) + 1);
    let done = false;
    return () => {
      if (done) return;
      done = true;
      const n = (this.held.get(dir) ?? 1) - 1;
      if (n > 0) this.held.set(dir, n); else this.held.delete(dir);
    };
  }

  private async get(dir: string, src: TemplateSource, ramPadKb: number, trust: TrustOverlay | null): Promise<Template> {
    const at = (d: string): Template => {
      const f = this.host.layout.templateFiles(d);
      return { dir: d, disk: f.disk, ram: f.ram, state: f.state, ramPadKb, env: trust?.env ?? {} };
    };
    const info = this.host.layout.templateFiles(dir).info;
    if (existsSync(info)) {
      const now = new Date();
      utimesSync(info, now, now); // when it was last used: collect() reads it
      return at(dir);
    }
    let p = this.building.get(dir);
    if (!p) {
      p = this.build(src, dir, ramPadKb, trust).then(() => at(dir)).finally(() => this.building.delete(dir));
      this.building.set(dir, p);
    }
    return p;
  }

  /**
   * Deletes the templates under `roots` (directories only this server uses) that no machine or
   * snapshot stands on (`inUse`: template directories their disk chains name) and nobody used
   * for `idleMs`, and builds a crash left behind. Returns how many templates went.
   */
  async collect(roots: readonly string[], inUse: ReadonlySet<string>, idleMs: number): Promise<number> {
    let deleted = 0;
    for (const root of roots) {
      let names: string[] = [];
      try { names = readdirSync(root); } catch { continue; }
      for (const name of names) {
        const dir = path.join(root, name);
        if (name.includes('.deleting-')) { await removeTree(dir); continue; }
        const building = name.indexOf('.building-');
        if (building >= 0) {
          if (!this.building.has(path.join(root, name.slice(0, building)))) await removeTree(dir);
          continue;
        }
        if (inUse.has(dir) || this.held.has(dir) || this.building.has(dir)) continue;
        let lastUsed = 0;
        try { lastUsed = statSync(this.host.layout.templateFiles(dir).info).mtimeMs; } catch { /* incomplete: never used */ }
        if (Date.now() - lastUsed < idleMs) continue;
        // Out of the way at once (a create meanwhile builds it anew), then deleted.
        const doomed = `${dir}.deleting-${process.pid}`;
        renameSync(dir, doomed);
        await removeTree(doomed);
        deleted++;
      }
    }
    return deleted;
  }

  private async build(src: TemplateSource, dir: string, ramPadKb: number, trust: TrustOverlay | null): Promise<void> {
    const started = Date.now();
    const tmp = `${dir}.building-${process.pid}`;
    rmSync(tmp, { recursive: true, force: true });
    mkdirSync(tmp, { recursive: true });
    this.host.give(tmp);
    const { layout } = this.host;
    const files = layout.templateFiles(tmp);
    const ram = layout.tempRam(`template-${path.basename(dir)}-${process.pid}`);
    this.log.info({ template: path.basename(dir), layers: src.layers.length }, 'building a machine template (one boot)');
    let vm: QemuVm | null = null;
    try {
      const above = [...(trust ? [trust.dir] : []), this.host.guest.dir, this.host.assets.layer];
      await buildDisk(this.layers, this.host.runtime, src.layers, above, files.base, layout.buildDir);
      // Relative: the chain must survive the rename below.
      chmodSync(files.base, 0o644); // every machine's QEMU reads it
      await overlay(path.basename(files.base), files.disk, tmp);
      this.host.give(files.disk);
      writeFileSync(ram, ''); // QEMU sizes it; it must exist to be bound into QEMU's confinement
      this.host.give(ram);
      vm = await QemuVm.launch({
        assets: this.host.assets, accel: this.host.accel.accel, memoryMb: src.memoryMb, ramPadKb, cpus: src.cpus, ram, disk: files.disk,
        runDir: tmp, writable: [tmp, ram], readable: [], ports: [], cgroup: this.host.cgroup(src.memoryMb, src.cpus), userns: this.host.uid !== 0,
        runtime: this.host.runtime, egress: { forward: this.host.forward, socket: path.join(tmp, 'no-egress.sock') }, // a template's boot has no network
      });
      const agentSock = layout.agentSocket(tmp);
      await vm.bridge(agentSock, this.host.agentPort);
      const agent = new Agent(agentSock);
      try {
        await this.waitForSystemd(agent, vm, started);
        const base = await agent.run({ argv: ['bash', '-c', RECORD_BASE], timeoutMs: BOOT_TIMEOUT_MS, outputBytes: 64 * 1024 });
        if (base.exitCode !== 0) throw new Error(`recording the disk's paths failed: ${base.stderr.toString().trim()}`);
      } finally {
        agent.close();
      }
      await vm.stop();
      await vm.saveState(files.state);
      await vm.quit();
      vm = null;
      await copySparse(ram, files.ram);
      writeFileSync(files.info, JSON.stringify({
        format: TEMPLATE_FORMAT, layers: src.layers, memoryMb: src.memoryMb, ramPadKb, cpus: src.cpus, qemu: await qemuBuild(),
        accel: this.host.accel.accel, builtAt: new Date().toISOString(), bootMs: Date.now() - started,
      }, null, 2));
      for (const f of [layout.agentSocket(tmp), layout.qmpSocket(tmp)]) rmSync(f, { force: true });
      if (existsSync(layout.templateFiles(dir).info)) rmSync(tmp, { recursive: true, force: true });
      else { rmSync(dir, { recursive: true, force: true }); renameSync(tmp, dir); }
      this.log.info({ template: path.basename(dir), ms: Date.now() - started }, 'machine template ready');
    } catch (e) {
      const tail = consoleTail(tmp);
      await vm?.kill();
      rmSync(tmp, { recursive: true, force: true });
      throw new Error(`building a machine template failed: ${(e as Error).message}${tail ? `\nconsole:\n${tail}` : ''}`);
    } finally {
      rmSync(ram, { force: true });
    }
  }

  /** Polls the agent until `systemctl is-system-running --wait` answers running (or degraded). */
  private async waitForSystemd(agent: Agent, vm: QemuVm, started: number): Promise<void> {
    let exited = false;
    void vm.exited.then(() => { exited = true; });
    for (;;) {
      if (exited) throw new Error(`QEMU exited during the boot: ${await vm.exited}`);
      if (Date.now() - started > BOOT_TIMEOUT_MS) throw new Error(`systemd was not up after ${BOOT_TIMEOUT_MS / 1000} s`);
      try {
        const r = await agent.run({ argv: ['systemctl', 'is-system-running', '--wait'], timeoutMs: BOOT_TIMEOUT_MS, outputBytes: 4096 });
        const said = r.stdout.toString().trim();
        if (said === 'running' || said === 'degraded') return;
        throw new Error(`systemd says ${said || r.stderr.toString().trim()}`);
      } catch (e) {
        if (!/agent|closed|ECONN/.test((e as Error).message)) throw e;
        await new Promise((r) => setTimeout(r, 500)); // the agent is not listening yet
      }
    }
  }
}
