import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import type { Logger } from 'pino';
import { SBX_EGRESS } from '../util/native.js';

/** What sbx-egress reports (native/egress.c has the protocol). */
export interface PlaneEvents {
  request(conn: number, session: string, head: Buffer): void;
  failed(conn: number, why: string): void;
  closed(conn: number, bytesOut: number, bytesIn: number): void;
  /** The process died: every connection it had is gone (no `closed` will come for them). */
  lost(): void;
}

const hex = (b: Buffer) => (b.length ? b.toString('hex') : '-');

/**
 * The egress proxy's data plane, a process of its own (native/egress.c):
 * commands go to its stdin, events come from its stdout, a line each.
 * Should it die, it is started again (the sessions it had are gone; their
 * sandboxes' connections fail, and new sessions work).
 */
export class EgressPlane {
  private child!: ChildProcess;
  private readonly waiting = new Map<string, { resolve: () => void; reject: (e: Error) => void }>();
  private closing = false;

  constructor(private readonly events: PlaneEvents, private readonly log: Logger) {
    this.start();
  }

  private start(): void {
    const child = spawn(SBX_EGRESS, [], { stdio: ['pipe', 'pipe', 'inherit'] });
    this.child = child;
    createInterface({ input: child.stdout! }).on('line', (line) => this.onLine(line));
    child.stdin!.on('error', () => undefined);
    child.once('exit', (code, signal) => {
      for (const w of this.waiting.values()) w.reject(new Error('the egress data plane exited'));
      this.waiting.clear();
      if (this.closing) return;
      this.log.error({ code, signal }, 'sbx-egress exited; starting it again');
      this.events.lost();
      this.start();
    });
  }

  private onLine(line: string): void {
    const f = line.split(' ');
    switch (f[0]) {
      case 'request': this.events.request(Number(f[1]), f[2], Buffer.from(f[3], 'hex')); break;
      case 'failed': this.events.failed(Number(f[1]), f.slice(2).join(' ')); break;
      case 'closed': this.events.closed(Number(f[1]), Number(f[2]), Number(f[3])); break;
      case 'connected': break;
      case 'opened': case 'shut': this.settle(f[1]); break;
      case 'error': this.settle(f[1], new Error(f.slice(2).join(' '))); break;
      default: this.log.warn({ line }, 'sbx-egress said something unknown');
    }
  }

  private settle(session: string, err?: Error): void {
    const w = this.waiting.get(session);
    this.waiting.delete(session);
    if (err) w?.reject(err); else w?.resolve();
  }

  private send(line: string): void {
    this.child.stdin!.write(`${line}\n`);
  }

  private ask(session: string, line: string): Promise<void> {
    return new Promise((resolve, reject) => {
      this.waiting.set(session, { resolve, reject });
      this.send(line);
    });
  }

  /** Listens on DIR/egress.sock for the sockets a sandbox hands over (`direct`: for connections that are the clients themselves, the server's own). */
  open(session: string, dir: string, uid: number, direct = false): Promise<void> {
    return this.ask(session, `open ${session} ${dir} ${uid}${direct ? ' direct' : ''}`);
  }

  /** Stops listening and cuts the session's connections (their `closed` events come first). */
  close(session: string): Promise<void> {
    return this.ask(session, `close ${session}`);
  }

  allow(conn: number, address: string, port: number, upstream: Buffer, ok: Buffer, failed: Buffer): void {
    this.send(`allow ${conn} ${address} ${port} ${hex(upstream)} ${hex(ok)} ${hex(failed)}`);
  }

  deny(conn: number, answer: Buffer): void {
    this.send(`deny ${conn} ${hex(answer)}`);
  }

  /** The data plane's process id (diagnostics and tests). */
  get pid(): number | undefined { return this.child.pid; }

  async stop(): Promise<void> {
    this.closing = true;
    this.child.stdin!.end();
    if (this.child.exitCode === null) await new Promise((r) => this.child.once('exit', r));
  }
}
