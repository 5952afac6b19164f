import type { NetworkPolicy } from '@shellbase/protocol';
import type { Logger } from 'pino';
import type { Caller } from '../../core/deps.js';
import type { Cluster } from '../../core/cluster.js';
import { ShellbaseError, invalid } from '../../errors.js';
import { IMAGE_NAMES } from '../../images/index.js';
import type { MachineRow } from '../../machines/index.js';
import type { Operations } from '../../ops/dispatch.js';
import { E2B_EXTENSION, asExtension, e2bOf, newRecord, type E2bSandboxSpec } from './record.js';
import { reportLifecycle } from './events.js';
import { KeyedLock } from '../../util/keyed-lock.js';
import { DEFAULT_USER } from './guest.js';

/** A sandbox: a machine the E2B-compatible API made, and what it keeps about it. */
export interface Sandbox { row: MachineRow; e2b: E2bSandboxSpec }

export interface NewSandbox {
  template: string;
  timeoutS: number;
  metadata: Record<string, string>;
  envs: Record<string, string>;
  onTimeout: 'kill' | 'pause';
  /** False: a pause at the timeout drops the memory. */
  keepMemory: boolean;
  autoResume: boolean;
  publicTraffic: boolean;
  /** Narrows the template's egress policy (compat/e2b/network.ts). */
  network?: NetworkPolicy;
  /** Volumes (contexts) copied into it at their paths, writable (`volumeMounts`: compat/e2b/volumes.ts). */
  mounts?: { context: string; path: string }[];
}

/** The E2B default template: shellbase's debian image. */
export const BASE_TEMPLATE = 'base';
/** E2B's template ids that name a built-in image of another name: `base`, and the code interpreter's (its SDK's default). */
const TEMPLATE_IMAGES: Record<string, string> = { [BASE_TEMPLATE]: 'debian', 'code-interpreter-v1': 'code-interpreter' };

/**
 * Where a sandbox's create-time `envs` are written in the guest (root's, mode 0600), as
 * `{"version": 1, "envs": {...}}`. Commands get them from the sandbox's record; this file is for
 * what runs in the guest since before the sandbox was made: the code interpreter (its server
 * starts with the template) reads it at each execution (ci_server/sandbox_env.py).
 */
export const GUEST_ENV_FILE = '/run/shellbase/sandbox-envs.json';
const isSnapshot = (t: string) => /^s_[a-z0-9]{1,64}$/.test(t);

/** How often, in a cluster, one worker ends the sandboxes past their timeout that no live worker runs. */
const SWEEP_MS = 15_000;
/** At most one reload of every sandbox's token per this long (a signature no known token made). */
const RELOAD_MS = 1_000;

/** What the sandboxes need of the server beside machines (server.ts gives them). */
export interface SandboxesOptions {
  log: Logger;
  /** Cluster mode: locks shared by the workers (absent in the embedded default). */
  cluster?: Pick<Cluster, 'exclusive'>;
}

/**
 * E2B sandboxes over machines. The sandbox id is the machine id, so the shellbase API and CLI
 * (fork, commit, exec) work on it; the sandbox's own fields live in the machine's spec (`e2b`).
 * Its timeout is its lifetime: when it runs out the machine is deleted, or hibernated when the
 * sandbox asked to pause on timeout. The end of life is the spec's `endAt`, so it survives the
 * server; timers are in memory, armed from it.
 *
 * Embedded, one process runs every machine: a timer per sandbox, armed again for all at start.
 * In a cluster only the worker running a machine acts on it: a worker arms a sandbox's timer when
 * it makes it, changes it, or takes its machine's lease (a wake or restore here:
 * `Machines.onTaken`), and when the timer fires acts only if no other live worker runs the
 * machine then (that one armed its own). A sandbox past its end that no live worker runs (its
 * worker died, or restarted) is ended by a sweep every SWEEP_MS, on one worker at a time.
 */
export class Sandboxes {
  /** Sandbox id → tenant: envd and port traffic carry no API key, only the sandbox id. In a cluster, a cache of the store's rows. */
  private readonly owners = new Map<string, string>();
  /** Sandbox id → its envd token: a signed URL names no sandbox, only a signature one of them made. */
  private readonly tokens = new Map<string, string>();
  private readonly timers = new Map<string, NodeJS.Timeout>();
  private readonly lock = new KeyedLock();
  /** Sandboxes being paused on this worker (`pause`, until their record says so). */
  private readonly pausing = new Set<string>();
  /** Sandboxes being killed on this worker: envd traffic finds them gone already (a stream their end broke asks `/health`). */
  private readonly killing = new Set<string>();
  private sweeper: NodeJS.Timeout | null = null;
  private reloading: Promise<void> | null = null;
  private reloadedAt = 0;

  constructor(private readonly ops: Operations, private readonly deps: SandboxesOptions) {}

  async open(): Promise<void> {
    const clustered = this.deps.cluster !== undefined;
    for (const row of await this.ops.machineRecords.all()) {
      const e2b = e2bOf(row);
      if (e2b) this.know(row.id, row.tenantId, e2b, !clustered);
    }
    if (!clustered) return;
    this.ops.machineRecords.onTaken((id) => { void this.adopt(id); });
    this.sweeper = setInterval(() => { void this.sweep(); }, SWEEP_MS);
    this.sweeper.unref();
  }

  close(): void {
    for (const t of this.timers.values()) clearTimeout(t);
    this.timers.clear();
    if (this.sweeper) clearInterval(this.sweeper);
    this.sweeper = null;
  }

  /** The tenant a sandbox belongs to (in a cluster, one another worker made is looked up in the store). */
  async tenantOf(id: string): Promise<string | undefined> {
    if (this.killing.has(id)) return undefined;
    const known = this.owners.get(id);
    if (known !== undefined || !this.deps.cluster || !/^m_[a-z0-9]{1,64}$/.test(id)) return known;
    const row = await this.ops.machineRecords.find(id);
    const e2b = row && e2bOf(row);
    if (!row || !e2b) return undefined;
    this.know(row.id, row.tenantId, e2b, false);
    return row.tenantId;
  }

  /**
   * The sandbox whose token signed a URL (`signed` checks one token). In a cluster, a signature
   * no known token made reloads every sandbox's token from the store (at most once per RELOAD_MS).
   */
  async bySignature(signed: (token: string) => boolean): Promise<string | undefined> {
    const find = () => { for (const [id, token] of this.tokens) if (signed(token)) return id; return undefined; };
    const found = find();
    if (found !== undefined || !this.deps.cluster) return found;
    await this.reload();
    return find();
  }

  private reload(): Promise<void> {
    if (!this.reloading && Date.now() - this.reloadedAt >= RELOAD_MS) {
      this.reloading = this.ops.machineRecords.all().then((rows) => this.learn(rows)).finally(() => { this.reloadedAt = Date.now(); this.reloading = null; });
    }
    return this.reloading ?? Promise.resolve();
  }

  /** The store's sandboxes (every tenant's): known from now, and those it no longer has forgotten (their timers left to fire). */
  private learn(rows: MachineRow[]): void {
    const ids = new Set<string>();
    for (const row of rows) {
      const e2b = e2bOf(row);
      if (!e2b) continue;
      ids.add(row.id);
      this.know(row.id, row.tenantId, e2b, false);
    }
    for (const id of this.owners.keys()) {
      if (!ids.has(id)) { this.owners.delete(id); this.tokens.delete(id); }
    }
  }

  /** `arm`: its timer too (this worker runs it, or answers for it). */
  private know(id: string, tenantId: string, e2b: E2bSandboxSpec, arm: boolean): void {
    this.owners.set(id, tenantId);
    this.tokens.set(id, e2b.accessToken);
    if (arm) this.schedule(id, tenantId, e2b);
  }

  /** Cluster mode: a machine's lease was taken here; if it is a sandbox that runs, its timer is this worker's now. */
  private async adopt(id: string): Promise<void> {
    try {
      const row = await this.ops.machineRecords.find(id);
      // Not yet in the store: a sandbox being made here, whose maker arms its timer.
      const e2b = row && e2bOf(row);
      if (!row || !e2b) return;
      this.know(row.id, row.tenantId, e2b, false);
      if (!e2b.paused && !this.timers.has(id)) this.schedule(id, row.tenantId, e2b);
    } catch (err) {
      this.deps.log.error({ err, sandbox: id }, 'arming the timeout of an E2B sandbox woken here failed');
    }
  }

  /** A caller acting for the tenant that owns a sandbox (envd traffic, timers). Release its hold when done. */
  callerFor(tenantId: string): Promise<Caller> {
    return this.ops.callerFor(tenantId);
  }

  async get(caller: Caller, id: string): Promise<Sandbox> {
    const notFound = () => new ShellbaseError('not_found', `sandbox ${JSON.stringify(id)} not found`, { details: { sandbox: id } });
    if (typeof id !== 'string' || !/^m_[a-z0-9]{1,64}$/.test(id)) throw notFound();
    const row = await this.ops.run(caller, 'machine.record', { id }).catch((e: unknown) => { throw e instanceof ShellbaseError && e.code === 'not_found' ? notFound() : e; });
    const e2b = e2bOf(row);
    if (!e2b) throw notFound();
    return { row, e2b };
  }

  async list(caller: Caller): Promise<Sandbox[]> {
    return (await this.ops.run(caller, 'machine.records', {})).flatMap((row) => { const e2b = e2bOf(row); return e2b ? [{ row, e2b }] : []; });
  }

  /**
   * `base` is the debian image, `code-interpreter-v1` the code-interpreter image; an image's name,
   * that image; a snapshot id, that snapshot; anything else, a context of the caller.
   */
  async create(caller: Caller, req: NewSandbox): Promise<Sandbox> {
    const t = req.template;
    const e2b = newRecord(req, t);
    let id: string;
    if (isSnapshot(t)) {
      if (req.network) throw invalid('a snapshot keeps the network rules it was taken with', 'leave the network options unset for a snapshot template');
      if (req.mounts?.length) throw invalid('a snapshot keeps the volumes it was taken with', 'leave volumeMounts unset for a snapshot template');
      [{ id }] = await this.ops.run(caller, 'snapshot.restore', { id: t, count: 1 });
      await this.ops.run(caller, 'machine.setExtension', { id, name: E2B_EXTENSION, value: e2b });
    } else {
      const image = Object.hasOwn(TEMPLATE_IMAGES, t) ? TEMPLATE_IMAGES[t] : (IMAGE_NAMES as string[]).includes(t) ? t : null;
      if (image === null && !(await this.hasContext(caller, t))) {
        throw new ShellbaseError('not_found', `template ${JSON.stringify(t)} not found`, { hint: 'name base, an image, one of your contexts, or a snapshot id' });
      }
      const source = { ...(image !== null ? { image } : { context: t }), ...(req.network ? { network: req.network } : {}), ...(req.mounts?.length ? { mounts: req.mounts } : {}) };
      ({ id } = await this.ops.run(caller, 'machine.create', { req: source, extensions: asExtension(e2b) }));
    }
    // A volume's mount point belongs to the sandbox's default user, as what it writes there does.
    if (req.mounts?.length) {
      const owned = await this.ops.run(caller, 'machine.exec', { id, req: { argv: ['chown', `${DEFAULT_USER}:${DEFAULT_USER}`, '--', ...req.mounts.map((m) => m.path)] }, hooks: {} }).catch((e: unknown) => ({ exitCode: -1, stderr: String(e) }));
      if (owned.exitCode !== 0) {
        await this.ops.run(caller, 'machine.remove', { id }).catch((err: unknown) => this.deps.log.error({ err, sandbox: id }, 'removing a sandbox whose volumes could not be given to its user failed'));
        throw new ShellbaseError('internal', `giving the sandbox's volumes to ${DEFAULT_USER} failed: ${owned.stderr}`);
      }
    }
    // A snapshot's memory may hold the envs of the sandbox it was taken from: its file is written over, empty or not.
    if (Object.keys(req.envs).length > 0 || isSnapshot(t)) {
      await this.writeEnvs(caller, id, req.envs).catch(async (e: unknown) => {
        await this.ops.run(caller, 'machine.remove', { id }).catch((err: unknown) => this.deps.log.error({ err, sandbox: id }, 'removing a sandbox whose envs could not be written failed'));
        throw e;
      });
    }
    this.know(id, caller.tenantId, e2b, true);
    const made = await this.get(caller, id);
    await reportLifecycle(this.ops, caller, made, 'created');
    return made;
  }

  /** Whether the caller has a context of that name (a template that names one; `name:tag` names none). */
  private hasContext(caller: Caller, name: string): Promise<boolean> {
    return this.ops.run(caller, 'context.get', { context: name }).then(() => true, (e: unknown) => {
      if (e instanceof ShellbaseError && (e.code === 'not_found' || e.code === 'invalid_argument')) return false;
      throw e;
    });
  }

  /** The sandbox's create-time envs into the guest (GUEST_ENV_FILE). */
  private async writeEnvs(caller: Caller, id: string, envs: Record<string, string>): Promise<void> {
    const data = Buffer.from(JSON.stringify({ version: 1, envs }));
    await this.ops.run(caller, 'machine.writeFile', { id, path: GUEST_ENV_FILE, data, mode: 0o600 });
  }

  /** Read, change, write one sandbox's record, one change at a time per sandbox. */
  private update(caller: Caller, id: string, change: (s: Sandbox) => Promise<E2bSandboxSpec>): Promise<Sandbox> {
    return this.lock.run(id, async () => {
      const s = await this.get(caller, id);
      const e2b = await change(s);
      await this.ops.run(caller, 'machine.setExtension', { id, name: E2B_EXTENSION, value: e2b });
      this.schedule(id, caller.tenantId, e2b);
      return { row: s.row, e2b };
    });
  }

  /** Its timeout from now. */
  async setTimeout(caller: Caller, id: string, seconds: number): Promise<Sandbox> {
    const s = await this.update(caller, id, async (s) => ({ ...s.e2b, endAt: new Date(Date.now() + seconds * 1000).toISOString() }));
    await reportLifecycle(this.ops, caller, s, 'updated', { set_timeout: s.e2b.endAt });
    return s;
  }

  /**
   * Running again if paused (its memory restored; paused without memory, booted from its disk),
   * and alive at least `seconds` from now. Whether it was paused.
   */
  async connect(caller: Caller, id: string, seconds: number): Promise<{ sandbox: Sandbox; resumed: boolean }> {
    let resumed = false;
    const sandbox = await this.update(caller, id, async (s) => {
      if (s.row.state === 'stopped') {
        throw new ShellbaseError('failed_precondition', `sandbox ${id} was stopped (a server crash lost its memory)`, { hint: 'kill it and create another' });
      }
      resumed = s.e2b.paused || s.row.state === 'paused';
      if (resumed) await this.ops.run(caller, 'machine.resume', { id });
      // A boot's /run is new: the envs' file is written again.
      if (resumed && s.e2b.pausedWithoutMemory && Object.keys(s.e2b.envs).length > 0) await this.writeEnvs(caller, id, s.e2b.envs);
      const { pausedWithoutMemory: _was, ...e2b } = s.e2b;
      const endAt = Math.max(Date.parse(s.e2b.endAt), Date.now() + seconds * 1000);
      return { ...e2b, paused: false, endAt: new Date(endAt).toISOString() };
    });
    if (resumed) await reportLifecycle(this.ops, caller, sandbox, 'resumed');
    return { sandbox, resumed };
  }

  /**
   * Hibernates it (memory to disk; `memory` false: its memory dropped, its disk kept); false if it
   * was paused already. Its record says `paused` in the same write as its hibernated state, before
   * its lease is given up: in a cluster no worker finds it hibernated and not paused (and wakes it).
   */
  async pause(caller: Caller, id: string, memory = true): Promise<boolean> {
    try {
      return await this.lock.run(id, async () => {
        const s = await this.get(caller, id);
        if (s.e2b.paused) return false;
        this.pausing.add(id);
        const e2b: E2bSandboxSpec = { ...s.e2b, paused: true, ...(memory ? {} : { pausedWithoutMemory: true }) };
        // A machine that lost its memory (a stopped one, or in a cluster a lost one) has none to keep.
        const { state } = await this.ops.run(caller, 'machine.get', { id });
        if (state !== 'stopped' && state !== 'lost') await this.ops.run(caller, 'machine.hibernate', { id, extensions: asExtension(e2b), memory });
        else await this.ops.run(caller, 'machine.setExtension', { id, name: E2B_EXTENSION, value: e2b });
        this.schedule(id, caller.tenantId, e2b);
        await reportLifecycle(this.ops, caller, s, 'paused');
        return true;
      });
    } finally {
      this.pausing.delete(id);
    }
  }

  /**
   * Whether traffic should find the sandbox paused: it is, or it is being paused here (its
   * machine hibernating, its record not written yet), so that no call wakes it again meanwhile.
   */
  isPaused(s: Sandbox): boolean { return s.e2b.paused || this.pausing.has(s.row.id); }

  async kill(caller: Caller, id: string): Promise<void> {
    await this.lock.run(id, async () => {
      const s = await this.get(caller, id);
      this.killing.add(id);
      try {
        await this.ops.run(caller, 'machine.remove', { id });
        this.forget(id);
        await reportLifecycle(this.ops, caller, s, 'killed');
      } finally {
        this.killing.delete(id);
      }
    });
  }

  /** `count` copies with its memory, processes and disk; each a sandbox of its own (new tokens, its timeout from now). */
  async fork(caller: Caller, id: string, count: number, seconds: number): Promise<Sandbox[]> {
    const s = await this.get(caller, id);
    const copies = await this.ops.run(caller, 'machine.fork', { id, count });
    const out: Sandbox[] = [];
    for (const m of copies) {
      const e2b = newRecord({ ...s.e2b, timeoutS: seconds, publicTraffic: !s.e2b.trafficToken }, s.e2b.templateId);
      await this.ops.run(caller, 'machine.setExtension', { id: m.id, name: E2B_EXTENSION, value: e2b });
      this.know(m.id, caller.tenantId, e2b, true);
      out.push(await this.get(caller, m.id));
      await reportLifecycle(this.ops, caller, out.at(-1)!, 'created');
    }
    return out;
  }

  private forget(id: string): void {
    this.owners.delete(id);
    this.tokens.delete(id);
    clearTimeout(this.timers.get(id));
    this.timers.delete(id);
  }

  /** Arms the end of a sandbox's timeout (none while it is paused). */
  private schedule(id: string, tenantId: string, e2b: E2bSandboxSpec): void {
    clearTimeout(this.timers.get(id));
    this.timers.delete(id);
    if (e2b.paused) return;
    // setTimeout holds at most ~24.8 days; timeouts are at most a week.
    const t = setTimeout(() => { void this.expire(id, tenantId); }, Math.max(0, Date.parse(e2b.endAt) - Date.now()));
    t.unref();
    this.timers.set(id, t);
  }

  /**
   * A sandbox's timer fired. In a cluster, a worker other than the one running its machine lets
   * it go (that worker has its own); an end of life moved meanwhile (by this worker or the one
   * that ran it) arms it again; one due is ended here, by one worker at a time when none runs it.
   */
  private async expire(id: string, tenantId: string): Promise<void> {
    this.timers.delete(id);
    let caller: Caller | null = null;
    try {
      const cluster = this.deps.cluster;
      if (cluster && (await this.ops.where({ machine: id }, null, false))) return;
      caller = await this.callerFor(tenantId);
      const s = await this.get(caller, id);
      if (s.e2b.paused) return;
      if (Date.parse(s.e2b.endAt) > Date.now() + 1000) { this.schedule(id, tenantId, s.e2b); return; }
      const c = caller;
      if (cluster) await cluster.exclusive(`e2b-timeout:${id}`, () => this.end(c, id), { wait: false });
      else await this.end(c, id);
    } catch (err) {
      if (err instanceof ShellbaseError && err.code === 'not_found') { this.forget(id); return; }
      this.deps.log.error({ err, sandbox: id }, 'ending an E2B sandbox at its timeout failed');
    } finally {
      caller?.hold.release();
    }
  }

  /** Ends a sandbox whose time is up: deleted, or paused when it asked to be. */
  private async end(caller: Caller, id: string): Promise<void> {
    const s = await this.get(caller, id);
    if (s.e2b.paused || Date.parse(s.e2b.endAt) > Date.now() + 1000) return;
    if (s.e2b.onTimeout === 'pause') await this.pause(caller, id, s.e2b.keepMemory !== false);
    else await this.kill(caller, id);
  }

  /**
   * Cluster mode: ends the sandboxes past their end of life that no timer here waits for (their
   * worker died or left, or they hibernated on one that restarted), one worker at a time; and
   * refreshes what this worker knows of every sandbox while it reads them.
   */
  private async sweep(): Promise<void> {
    try {
      await this.deps.cluster!.exclusive('e2b-timeouts', async () => {
        const rows = await this.ops.machineRecords.all();
        this.learn(rows);
        for (const row of rows) {
          const e2b = e2bOf(row);
          if (!e2b || e2b.paused || this.timers.has(row.id) || Date.parse(e2b.endAt) > Date.now()) continue;
          await this.expire(row.id, row.tenantId);
        }
      }, { wait: false });
    } catch (err) {
      this.deps.log.error({ err }, 'ending E2B sandboxes past their timeout failed');
    }
  }
}
