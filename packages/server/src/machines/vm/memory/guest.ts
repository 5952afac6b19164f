import path from 'node:path';
import { GuestError, type GuestOps, type GuestRead } from '../types.js';
import type { DiskChain, Entry } from './disk.js';

/** Bump when what a memory file holds changes. */
const MEMORY_FORMAT = 1;

/** A process of the guest's own (not the agent's): kept in its memory, saved and restored with it. */
export type Daemon =
  /** Writes 1, 2, 3… (a line each time) into `file` every `everyMs` of the guest's running time. */
  | { kind: 'ticker'; file: string; everyMs: number; value: number }
  /** Answers each connection to guest `port` with `text`, then closes it. */
  | { kind: 'serve'; port: number; text: string };

/** What an in-memory VM's memory file holds: the guest's clock, its `/run` (a tmpfs) and its processes. */
export interface GuestMemory {
  format: typeof MEMORY_FORMAT;
  kind: 'shellbase-memory-ram';
  memoryMb: number;
  ramPadKb: number;
  /** The guest's wall clock (ms since the epoch) when it was saved. */
  clockMs: number;
  run: Record<string, { type: 'file'; data: string; mode: number } | { type: 'dir'; mode: number }>;
  daemons: Daemon[];
}

export function freshMemory(memoryMb: number, ramPadKb: number): GuestMemory {
  return { format: MEMORY_FORMAT, kind: 'shellbase-memory-ram', memoryMb, ramPadKb, clockMs: Date.now(), run: {}, daemons: [] };
}

export function parseMemory(text: string): GuestMemory {
  const m = JSON.parse(text) as GuestMemory;
  if (m.kind !== 'shellbase-memory-ram' || m.format !== MEMORY_FORMAT) throw new Error(`not a memory file of the in-memory VMs (format ${String(m.format)})`);
  return m;
}

/** Paths that are the guest's memory, not its disk (a tmpfs). */
const IN_MEMORY = '/run';

export const normalize = (p: string, cwd = '/'): string => path.posix.resolve(cwd, p);

/**
 * The guest of an in-memory VM: its file system (the disk chain; `/run` in its memory;
 * `/sys/block/vda/size` from the disk's size; `/dev/null`), its clock (stopped while paused,
 * set by the agent's settle), and its own processes (daemons), which run only while the guest
 * runs and are part of its memory.
 */
export class Guest {
  state: 'running' | 'paused' | 'ended' = 'paused';
  private readonly run = new Map<string, Entry>();
  private readonly daemons: Daemon[];
  private readonly timers = new Map<Daemon, NodeJS.Timeout>();
  private clockMs: number;
  private since = 0;
  private waiting: (() => void)[] = [];

  constructor(readonly disk: DiskChain, private readonly memory: GuestMemory) {
    for (const [p, e] of Object.entries(memory.run)) this.run.set(p, e.type === 'file' ? { ...e, data: Buffer.from(e.data, 'base64') } : e);
    this.daemons = memory.daemons.map((d) => ({ ...d }));
    this.clockMs = memory.clockMs;
  }

  /** The guest's wall clock (ms since the epoch). */
  now(): number { return this.state === 'running' ? this.clockMs + (Date.now() - this.since) : this.clockMs; }
  settle(ms: number): void { this.clockMs = ms; this.since = Date.now(); }

  resume(): void {
    if (this.state !== 'paused') return;
    this.state = 'running';
    this.since = Date.now();
    for (const d of this.daemons) this.startDaemon(d);
    for (const w of this.waiting.splice(0)) w();
  }

  pause(): void {
    if (this.state !== 'running') return;
    this.clockMs = this.now();
    this.state = 'paused';
    for (const t of this.timers.values()) clearInterval(t);
    this.timers.clear();
  }

  end(): void {
    this.pause();
    this.state = 'ended';
    for (const w of this.waiting.splice(0)) w();
  }

  /** Resolves while the guest runs (at once, or when it is resumed); rejects once it ended. */
  async running(): Promise<void> {
    while (this.state === 'paused') await new Promise<void>((r) => this.waiting.push(r));
    if (this.state === 'ended') throw new Error('the guest is gone');
  }

  /** Waits `ms` of the guest's running time (a paused guest's time stands still); false when `signal` ended it first. */
  async delay(ms: number, signal: AbortSignal): Promise<boolean> {
    let left = ms;
    while (left > 0 && !signal.aborted) {
      await this.running();
      const step = Math.min(left, 20);
      const t0 = Date.now();
      await new Promise<void>((r) => {
        const done = () => { clearTimeout(t); signal.removeEventListener('abort', done); r(); };
        const t = setTimeout(done, step);
        signal.addEventListener('abort', done, { once: true });
      });
      if (this.state === 'running') left -= Date.now() - t0;
    }
    return !signal.aborted;
  }

  /** The guest's memory as it stands (paused: what `save` writes). */
  memoryImage(): GuestMemory {
    const run: GuestMemory['run'] = {};
    for (const [p, e] of this.run) if (e.type !== 'symlink') run[p] = e.type === 'file' ? { ...e, data: e.data.toString('base64') } : e;
    return { ...this.memory, clockMs: this.now(), run, daemons: this.daemons.map((d) => ({ ...d })) };
  }

  addDaemon(d: Daemon): void {
    this.daemons.push(d);
    if (this.state === 'running') this.startDaemon(d);
  }

  /** The text the guest answers a connection to `port` with (null: nothing listens). */
  listener(port: number): string | null {
    const d = this.daemons.find((x) => x.kind === 'serve' && x.port === port);
    return d?.kind === 'serve' ? d.text : null;
  }

  private startDaemon(d: Daemon): void {
    if (d.kind !== 'ticker' || this.timers.has(d)) return;
    this.timers.set(d, setInterval(() => {
      d.value++;
      try { this.write(d.file, Buffer.from(`${d.value}\n`), 0o644); } catch { /* its directory went: it goes on counting */ }
    }, d.everyMs));
  }

  // The file system. Paths are absolute and normalized.

  get(p: string): Entry | null {
    if (p === '/' || p === IN_MEMORY || p === '/sys' || p === '/sys/block' || p === '/sys/block/vda' || p === '/dev') return { type: 'dir', mode: 0o755 };
    if (p === '/sys/block/vda/size') return { type: 'file', data: Buffer.from(`${Math.floor(this.disk.sizeBytes / 512)}\n`), mode: 0o444 };
    if (p === '/dev/null') return { type: 'file', data: Buffer.alloc(0), mode: 0o666 };
    return (inMemory(p) ? this.run.get(p) : this.disk.entries.get(p)) ?? null;
  }

  /** Follows symbolic links (at most 8). */
  resolve(p: string): Entry | null {
    let at = p;
    for (let i = 0; i < 8; i++) {
      const e = this.get(at);
      if (e?.type !== 'symlink') return e;
      at = normalize(e.target, path.posix.dirname(at));
    }
    return null;
  }

  list(dir: string): { name: string; dir: boolean }[] {
    const prefix = dir === '/' ? '/' : `${dir}/`;
    const names = new Map<string, boolean>();
    const add = (p: string, e: Entry) => {
      if (!p.startsWith(prefix) || p.slice(prefix.length).includes('/')) return;
      names.set(p.slice(prefix.length), e.type === 'dir');
    };
    for (const [p, e] of dir === IN_MEMORY || inMemory(dir) ? this.run : this.disk.entries) add(p, e);
    if (dir === '/') { names.set('run', true); names.set('sys', true); names.set('dev', true); }
    return [...names].map(([name, d]) => ({ name, dir: d })).sort((a, b) => (a.name < b.name ? -1 : 1));
  }

  write(p: string, data: Buffer, mode: number, append = false): void {
    if (p === '/dev/null') return;
    const parent = this.get(path.posix.dirname(p));
    if (parent?.type !== 'dir') throw new Error(`${p}: No such file or directory`);
    const old = this.get(p);
    if (old?.type === 'dir') throw new Error(`${p}: Is a directory`);
    const e: Entry = { type: 'file', data: append && old?.type === 'file' ? Buffer.concat([old.data, data]) : data, mode: old?.type === 'file' ? old.mode : mode };
    this.set(p, e);
  }

  chmod(p: string, mode: number): void {
    const e = this.get(p);
    if (!e || e.type === 'symlink') throw new Error(`${p}: No such file or directory`);
    this.set(p, { ...e, mode });
  }

  mkdir(p: string, parents: boolean): void {
    if (this.get(p)?.type === 'dir') { if (parents) return; throw new Error(`${p}: File exists`); }
    const up = path.posix.dirname(p);
    if (this.get(up)?.type !== 'dir') {
      if (!parents) throw new Error(`${p}: No such file or directory`);
      this.mkdir(up, true);
    }
    this.set(p, { type: 'dir', mode: 0o755 });
  }

  remove(p: string): void {
    if (inMemory(p)) { for (const k of [...this.run.keys()]) if (k === p || k.startsWith(`${p}/`)) this.run.delete(k); } else this.disk.set(p, null);
  }

  private set(p: string, e: Entry): void {
    if (p === '/' || p === IN_MEMORY || p.startsWith('/sys') || p.startsWith('/dev')) throw new Error(`${p}: Read-only file system`);
    if (inMemory(p)) this.run.set(p, e); else this.disk.set(p, e);
  }
}

const inMemory = (p: string) => p.startsWith(`${IN_MEMORY}/`);

/** The guest operations of an in-memory VM, straight on its file system. */
export class MemoryGuestOps implements GuestOps {
  constructor(private readonly guest: Guest) {}

  async read(p: string, maxBytes: number): Promise<GuestRead> {
    await this.guest.running();
    const at = normalize(p);
    const e = this.guest.resolve(at);
    if (!e) return { kind: 'missing' };
    if (e.type === 'dir') return { kind: 'dir', entries: this.guest.list(at).map((x) => (x.dir ? `${x.name}/` : x.name)) };
    if (e.type !== 'file') return { kind: 'missing' };
    return { kind: 'file', data: e.data.subarray(0, maxBytes), truncated: e.data.length > maxBytes };
  }

  async write(p: string, data: Buffer, mode: number): Promise<void> {
    await this.guest.running();
    const at = normalize(p);
    try {
      this.guest.mkdir(path.posix.dirname(at), true);
      this.guest.write(at, data, mode);
      this.guest.chmod(at, mode);
    } catch (e) {
      throw new GuestError((e as Error).message);
    }
  }

  async growRoot(sectors: number): Promise<void> {
    await this.guest.running();
    const has = Math.floor(this.guest.disk.sizeBytes / 512);
    if (has < sectors) throw new GuestError(`the guest still sees ${has} sectors of ${sectors}`);
  }

  /** Records when the base was made (`/var/lib/shellbase/stamp`); the in-memory guest keeps no list of its paths. */
  async recordBase(): Promise<void> {
    await this.guest.running();
    this.guest.mkdir('/var/lib/shellbase', true);
    this.guest.write('/var/lib/shellbase/stamp', Buffer.from(`${this.guest.now()}\n`), 0o644);
  }

  async changes(): Promise<{ data: Buffer; truncated: boolean }> {
    throw new GuestError('the in-memory guest cannot collect its changes (it has no tar)');
  }
}
