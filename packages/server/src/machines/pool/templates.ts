import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, renameSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { Logger } from 'pino';
import type { Snapshotter } from '../../store/snapshotter/types.js';
import type { MachineHost } from '../host.js';
import { consoleTail } from '../vm/console-log.js';
import { waitUntilReady } from './readiness.js';
import type { Vm } from '../vm/types.js';
import { removeTree } from '../../util/remove.js';
import type { TrustLayers, TrustOverlay } from '../../trust/index.js';

/** Bump when what a template holds or how it is made changes (4: the kernel layer on its disk). */
const TEMPLATE_FORMAT = 4;
/** A TCG boot of Debian with systemd takes ~40 s here; KVM a few. */
const BOOT_TIMEOUT_MS = 300_000;
/** How long an image's readiness check (readiness.ts) may take to pass after the boot: kernels start slowly under TCG. */
const READY_TIMEOUT_MS = 600_000;

/** A template's directory and the host's authorities its disk has (Templates.resolve). */
export interface ResolvedTemplate {
  dir: string;
  trust: TrustOverlay | null;
}

/** A booted machine frozen once its system was up: every machine of its source starts here. */
export interface Template {
  dir: string;
  /** Frozen top of its disk chain (over `base.raw`, the built disk). */
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
 * used through the VM backend: make the disk, boot it (the backend waits until
 * the guest's system is up), run the image's readiness check until it passes
 * (readiness.ts; when the disk has one), record the disk's base for commits,
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

  /** The template's key: a hash of its format, its source's layers, what the backend's boots depend on, its size and the host's authorities on its disk. */
  private async key(src: TemplateSource, trust: TrustOverlay | null): Promise<string> {
    const { backend } = this.host;
    const pad = backend.ramPadKb;
    return createHash('sha256').update(JSON.stringify({
      format: TEMPLATE_FORMAT, layers: src.layers, ...backend.bootKey,
      memoryMb: src.memoryMb, cpus: src.cpus, ...(pad ? { ramPadKb: pad } : {}), ...(trust ? { trust: trust.key } : {}),
    })).digest('hex').slice(0, 16);
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
      return await fn(await this.get(dir, src, this.host.backend.ramPadKb, trust).catch(failed));
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
    const { layout, backend } = this.host;
    const files = layout.templateFiles(tmp);
    const ram = layout.tempRam(`template-${path.basename(dir)}-${process.pid}`);
    this.log.info({ template: path.basename(dir), layers: src.layers.length }, 'building a machine template (one boot)');
    let vm: Vm | null = null;
    try {
      await backend.buildDisk({ snapshotter: this.layers, layers: src.layers, above: trust ? [trust.dir] : [], out: files.base, staging: layout.buildDir });
      // Relative: the chain must survive the rename below.
      await backend.overlay(path.basename(files.base), files.disk, tmp);
      // A template's boot has no network.
      vm = await backend.boot({ memoryMb: src.memoryMb, ramPadKb, cpus: src.cpus, ram, disk: [files.disk, files.base], runDir: tmp, ports: [], egress: null }, BOOT_TIMEOUT_MS);
      // What the image starts at boot gets ready before the memory is saved (and before the base
      // record, so that what it writes meanwhile is not a machine's change).
      const checks = await waitUntilReady(vm, { timeoutMs: READY_TIMEOUT_MS });
      if (checks > 0) this.log.info({ template: path.basename(dir), checks, ms: Date.now() - started }, 'the image\'s readiness check passed');
      await vm.guest.recordBase();
      await vm.pause();
      await vm.save({ ram: files.ram, state: files.state });
      await vm.quit();
      vm = null;
      writeFileSync(files.info, JSON.stringify({
        format: TEMPLATE_FORMAT, layers: src.layers, memoryMb: src.memoryMb, ramPadKb, cpus: src.cpus, qemu: backend.identity.build,
        accel: backend.identity.accel, builtAt: new Date().toISOString(), bootMs: Date.now() - started,
      }, null, 2));
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
}
