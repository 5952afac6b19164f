import { spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { rmSync } from 'node:fs';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { SBX } from '../../util/native.js';

/** A view nobody asked for this long is unmounted. */
const IDLE_MS = 30_000;
/** Views kept at most (the least recently used go first). */
const MAX_VIEWS = 256;
/** After the helper died, no view is asked for this long. */
const RESTART_MS = 60_000;

/** A view: asked for (not ready), mounted (ready), or refused by the helper (failed: not asked for again while it is kept). */
interface View { key: string; ready: boolean; failed?: boolean; used: number }

/**
 * Read-only views of mounted contexts' versions for warm sandboxes (native/views.c). A read-only
 * volume's layers are mounted once, as the read-only overlay a sandbox would mount itself, in the
 * mount namespace of one `sbx views` process: never in the host's mount table, and gone with that
 * process (which dies with the server). A warm sandbox then binds a clone of the view
 * (native/warm-mount.c `--view`) instead of setting up and tearing down an overlay of its own.
 *
 * `arg` answers at once: a view not mounted yet is asked for, and that sandbox mounts its own
 * overlay (as every sandbox of a stack whose view the helper refused does). A view unused for
 * IDLE_MS is unmounted (until then it holds its layers' files, even ones garbage collection
 * removed). Should the helper die, every view is gone, and asks wait RESTART_MS before the next
 * one starts it again (a helper that cannot run costs a start a minute, not one a query).
 */
export class Views {
  private child: ChildProcess | null = null;
  private readonly views = new Map<string, View>();
  private readonly sweeper: NodeJS.Timeout;
  private closed = false;
  private restingUntil = 0;

  constructor(private readonly dir: string, private readonly onError: (msg: string) => void = () => undefined) {
    // Mount points left by an earlier server: plain directories here (their mounts were in its helper's namespace).
    rmSync(dir, { recursive: true, force: true });
    this.sweeper = setInterval(() => this.sweep(), IDLE_MS / 2).unref();
  }

  /** `--view`'s value for a read-only volume at `target` showing `lower` (relative to `chdir`), or null while its view is not mounted. */
  arg(target: string, chdir: string, lower: string): string | null {
    if (this.closed) return null;
    const id = `${chdir}\0${lower}`;
    const v = this.views.get(id);
    if (v) {
      v.used = performance.now();
      this.views.delete(id); // most recent last
      this.views.set(id, v);
      return v.ready && this.child?.pid ? `${target.slice(1)},${this.child.pid},${path.join(this.dir, v.key)}` : null;
    }
    if (/[\t\n,]/.test(chdir + lower) || performance.now() < this.restingUntil) return null;
    const key = createHash('sha256').update(id).digest('hex').slice(0, 32);
    this.views.set(id, { key, ready: false, used: performance.now() });
    this.send(`m\t${key}\t${chdir}\t${lower}`);
    if (this.views.size > MAX_VIEWS) this.drop(this.views.keys().next().value!);
    return null;
  }

  /** Ends the helper, and with it every view. */
  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.sweeper);
    const child = this.child;
    this.child = null;
    this.views.clear();
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGKILL');
    await exited;
    rmSync(this.dir, { recursive: true, force: true });
  }

  private send(line: string): void {
    if (!this.child) this.start();
    this.child!.stdin!.write(`${line}\n`);
  }

  private start(): void {
    const child = spawn(SBX, ['views', '--dir', this.dir], { stdio: ['pipe', 'pipe', 'pipe'] });
    this.child = child;
    let stderr = '';
    child.stderr!.on('data', (c: Buffer) => { if (stderr.length < 4096) stderr += c.toString(); });
    child.stdin!.on('error', () => undefined);
    createInterface({ input: child.stdout! }).on('line', (line) => this.answered(line));
    const ended = (why: string) => {
      if (this.child !== child) return;
      this.child = null;
      this.views.clear();
      this.restingUntil = performance.now() + RESTART_MS;
      if (!this.closed) this.onError(`sbx views ${why}: ${stderr.trim().slice(0, 500) || 'no message'}`);
    };
    child.once('error', (e) => ended(`could not run (${e.message})`));
    child.once('exit', (code, signal) => ended(`exited (${code ?? signal})`));
  }

  private answered(line: string): void {
    const [word, cmd, key, ...why] = line.split(' ');
    if (cmd !== 'm') return; // an unmount's answer: its view is no longer kept
    for (const v of this.views.values()) {
      if (v.key !== key) continue;
      if (word === 'ok') v.ready = true;
      else if (!v.failed) { v.failed = true; this.onError(`a read-only view could not be mounted: ${why.join(' ')}`); }
      return;
    }
  }

  private sweep(): void {
    const now = performance.now();
    for (const [id, v] of this.views) if (now - v.used >= IDLE_MS) this.drop(id);
  }

  private drop(id: string): void {
    const v = this.views.get(id);
    if (!v) return;
    this.views.delete(id);
    if (this.child) this.child.stdin!.write(`u\t${v.key}\n`);
  }
}
