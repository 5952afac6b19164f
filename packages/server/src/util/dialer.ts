import { randomBytes } from 'node:crypto';
import { mkdirSync, readdirSync, rmSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { SBX } from './native.js';
import { spawner as defaultSpawner, type Spawner } from './spawner.js';

/** A program of the dialer, its stdin and/or stdout a connection to this process. */
export interface DialedProcess {
  /** The connection: write to it for the program's stdin (end() is its end of file), read it for its stdout. */
  readonly socket: net.Socket;
  /** The program's exit code (null when a signal ended it), once it ended and its output closed. */
  readonly exited: Promise<number | null>;
  /** What the program wrote on stderr (its first 4 KiB). */
  stderr(): string;
  /** What it wrote on stdout when that is not the connection (its first 64 KiB). */
  stdout(): string;
  /** Kills the program's whole process group (a sandbox's bwrap and what it started). */
  kill(): void;
}

export type Direction = 'in' | 'out' | 'both';

/**
 * Streams to and from programs without forking the server. A fork of a process of some
 * hundred MB copies its page tables, and every page it writes afterwards faults once (copy
 * on write): on this project's VMs that made the next ~25 MB a stream moved through the
 * server ~120 ms slower (docs/performance.md, images). So the spawner starts the program
 * (`sbx dial`), and the program connects its stdin and/or stdout to a Unix socket this
 * process listens on for it alone, in `dir` (mode 0700: nothing else can dial in).
 * Back-pressure holds both ways, as through a pipe.
 */
export class Dialer {
  constructor(private readonly dir: string, private readonly spawner: Spawner = defaultSpawner) {
    // A socket's path must fit sockaddr_un (108 bytes with its NUL).
    if (Buffer.byteLength(path.join(dir, `${'0'.repeat(16)}.sock`)) > 107) {
      throw new Error(`${dir} is too long a path for the server's sockets: give SHELLBASE_HOME a shorter path (at most ~75 bytes)`);
    }
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    // Sockets a crashed server left (their programs died with it).
    for (const f of readdirSync(dir)) if (f.endsWith('.sock')) rmSync(path.join(dir, f), { force: true });
  }

  /** `onStdout`: the program's stdout as it comes, when that is not the connection (then `stdout()` keeps none of it). */
  async start(argv: string[], direction: Direction, onStdout?: (chunk: Buffer) => void): Promise<DialedProcess> {
    const where = path.join(this.dir, `${randomBytes(8).toString('hex')}.sock`);
    const server = net.createServer({ allowHalfOpen: true });
    await new Promise<void>((resolve, reject) => { server.once('error', reject); server.listen(where, resolve); });
    const connected = new Promise<net.Socket>((resolve) => server.once('connection', (s: net.Socket) => {
      s.on('error', () => undefined); // its reader sees the error; none may reach the process as uncaught
      resolve(s);
    }));
    let stderr = '';
    let stdout = '';
    const spawned = this.spawner.start([SBX, 'dial', where, direction, '--', ...argv], undefined, {
      onStdout: (c) => { if (onStdout) onStdout(c); else if (stdout.length < 65536) stdout += c.toString(); },
      onStderr: (c) => { if (stderr.length < 4096) stderr += c.toString(); },
    });
    let ended = false;
    const exited = spawned.exited.then((e) => { ended = true; return e.code; }, () => { ended = true; return null; });
    const pid = await spawned.pid.catch(() => null);
    const kill = () => {
      if (ended || pid === null) { spawned.kill(); return; }
      try { process.kill(-pid, 'SIGKILL'); } catch { spawned.kill(); }
    };
    try {
      const socket = await Promise.race([
        connected,
        exited.then(async (code) => {
          // A quick program may end before its connection is accepted: it connected before it
          // ended, so the listening socket was ready when the end was read, and is accepted in
          // the same turn of the event loop (two are waited for).
          for (let i = 0; i < 2; i++) await new Promise(setImmediate);
          throw new Error(`${argv[0]} ended (exit ${code}) before it connected: ${stderr.trim().slice(0, 300)}`);
        }),
      ]);
      return { socket, exited, stderr: () => stderr, stdout: () => stdout, kill };
    } catch (e) {
      kill();
      void connected.then((s) => s.destroy()); // one that comes after all
      throw e;
    } finally {
      server.close();
      rmSync(where, { force: true });
    }
  }
}

/**
 * A write that failed because the program at the other end stopped reading (ended, or closed its
 * stdin). ECANCELED is a write still queued in this process when its end of the connection was
 * closed, as it is once the program ended (its writes are then cancelled, not failed).
 */
export const stoppedReading = (e: unknown): boolean => ['EPIPE', 'ECONNRESET', 'ECANCELED', 'ERR_STREAM_PREMATURE_CLOSE'].includes((e as NodeJS.ErrnoException).code ?? '');

/**
 * Starts `argv` with `body` as its stdin and waits for its end. A body that fails (a client
 * gone, a layer that does not check out) kills the program, so nothing half-read is taken for
 * whole, and its error is thrown: the program is killed the moment the body fails, before its
 * connection closes, so it never reads an end of file. A program that stops reading is not an
 * error here, whatever the write to it then gives: its exit code says why. Which of the two came
 * first decides, as a pipeline's failure reaches both.
 */
export async function feed(dialer: Dialer, argv: string[], body: Readable): Promise<{ program: DialedProcess; code: number | null }> {
  const held = holdErrors(body); // while the program starts
  let program: DialedProcess;
  try {
    program = await dialer.start(argv, 'in');
  } catch (e) {
    held();
    body.on('error', () => undefined).destroy();
    throw e;
  }
  let failed: unknown = held();
  let killed = false;
  const kill = () => { if (!killed) { killed = true; program.kill(); } };
  if (!failed) {
    let origin: 'body' | 'program' | null = null;
    let ended = false;
    // A body that fails first kills the program at once, in its own event, before the pipeline
    // closes the connection (a closed connection is an end of file to the program, which could
    // then take what it read for whole). A SIGKILL sent leaves the program no further read.
    const fromBody = () => { if (origin === null) { origin = 'body'; kill(); } };
    const cut = () => { if (!ended) fromBody(); }; // closed before its end, without an error
    const atEnd = () => { ended = true; };
    const fromProgram = () => { origin ??= 'program'; };
    // Ahead of the pipeline's own listeners, which close the connection.
    body.prependListener('error', fromBody).prependListener('close', cut).on('end', atEnd);
    program.socket.on('error', fromProgram);
    // A program that ended stops the wait at once (the body may be idle for long, a slow client).
    void program.exited.then(() => { origin ??= 'program'; program.socket.destroy(); });
    await pipeline(body, program.socket).catch((e: unknown) => {
      if (origin === 'body' || !stoppedReading(e)) failed = e;
    });
    body.off('error', fromBody).off('close', cut).off('end', atEnd);
  }
  if (failed) {
    kill(); // before the connection closes
    program.socket.destroy();
    body.on('error', () => undefined).destroy();
    await program.exited;
    throw failed;
  }
  const code = await program.exited;
  program.socket.destroy();
  return { program, code };
}

/**
 * Holds the errors of a stream nothing reads yet (while its program starts): an 'error' no one
 * listens to would be uncaught. The returned function stops holding and gives the first one.
 */
export function holdErrors(stream: Readable): () => unknown {
  let first: unknown = null;
  const keep = (e: unknown) => { first ??= e; };
  stream.on('error', keep);
  return () => {
    stream.off('error', keep);
    // Destroyed without an error before its end: cut short all the same.
    return first ?? stream.errored ?? (stream.destroyed && !stream.readableEnded ? new Error('the stream was closed before its end') : null);
  };
}
