import { connect, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';

/** What the gateway reaches by token: a service, or a machine's exposed port. */
export interface PortTarget {
  /** For error messages ("service web", "machine m_… port 8080"). */
  readonly name: string;
  /** Whose it is, and whether the gateway wants that tenant's API key as well as the URL's token. */
  readonly owner: { tenantId: string; requireKey: boolean };
  /** Wakes the target if needed; resolves once its Unix socket is there (connect with connectUnix). Call `release` when done. */
  acquire(): Promise<{ socketPath: string; release: () => void }>;
  /** Joins `client` to the target as a byte pipe (after `preface`), holding it awake until either side closes. */
  pipe(client: Duplex, preface?: (string | Buffer)[]): Promise<void>;
  /** In a cluster: the API and gateway URLs of the worker that runs the target now, when that is not this one. */
  elsewhere?(): Promise<{ api: string; gateway: string } | null>;
}

/** How long a refused connection to a target's Unix socket is tried again (connectUnix). */
const REFUSED_RETRY_MS = 2000;

/**
 * A connection to a Unix socket. A bridge that is starting (socat: bind, chmod, then listen) has
 * its socket file before it listens: a refused (or not yet there) connect is tried again, every
 * 10 ms, for up to `retryMs`.
 */
export async function connectUnix(socketPath: string, retryMs = REFUSED_RETRY_MS): Promise<Socket> {
  const deadline = Date.now() + retryMs;
  for (;;) {
    const s = connect(socketPath);
    try {
      await new Promise<void>((resolve, fail) => { s.once('connect', resolve); s.once('error', fail); });
      return s;
    } catch (e) {
      s.destroy();
      const code = (e as NodeJS.ErrnoException).code;
      if ((code !== 'ECONNREFUSED' && code !== 'ENOENT') || Date.now() >= deadline) throw e;
      await new Promise((r) => setTimeout(r, 10));
    }
  }
}

/** Wakes a target (`acquire`) and connects to its socket; when the connect fails, the target is released and the error thrown. */
export async function connectTarget(acquire: PortTarget['acquire']): Promise<{ up: Socket; release: () => void }> {
  const { socketPath, release } = await acquire();
  try {
    return { up: await connectUnix(socketPath), release };
  } catch (e) {
    release();
    throw e;
  }
}

/** PortTarget.pipe in terms of its acquire. */
export async function pipeThrough(acquire: PortTarget['acquire'], client: Duplex, preface: (string | Buffer)[] = []): Promise<void> {
  let up: Socket;
  let release: () => void;
  try {
    ({ up, release } = await connectTarget(acquire));
  } catch {
    client.destroy();
    return;
  }
  const done = () => { release(); client.destroy(); up.destroy(); };
  // A client gone while the connect was tried again has already closed: nothing would end this.
  if (client.destroyed) { done(); return; }
  up.once('close', done);
  client.once('close', done);
  up.on('error', done);
  client.on('error', done);
  for (const p of preface) if (p.length) up.write(p);
  client.pipe(up).pipe(client);
}
