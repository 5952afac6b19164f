import { connect } from 'node:net';
import type { Duplex } from 'node:stream';

/** What the gateway reaches by token: a service, or a machine's exposed port. */
export interface PortTarget {
  /** For error messages ("service web", "machine m_… port 8080"). */
  readonly name: string;
  /** Whose it is, and whether the gateway wants that tenant's API key as well as the URL's token. */
  readonly owner: { tenantId: string; requireKey: boolean };
  /** Wakes the target if needed; resolves once its Unix socket accepts. Call `release` when done. */
  acquire(): Promise<{ socketPath: string; release: () => void }>;
  /** Joins `client` to the target as a byte pipe (after `preface`), holding it awake until either side closes. */
  pipe(client: Duplex, preface?: (string | Buffer)[]): Promise<void>;
  /** In a cluster: the API and gateway URLs of the worker that runs the target now, when that is not this one. */
  elsewhere?(): Promise<{ api: string; gateway: string } | null>;
}

/** PortTarget.pipe in terms of its acquire. */
export async function pipeThrough(acquire: PortTarget['acquire'], client: Duplex, preface: (string | Buffer)[] = []): Promise<void> {
  const { socketPath, release } = await acquire();
  const up = connect(socketPath);
  const done = () => { release(); client.destroy(); up.destroy(); };
  up.once('close', done);
  client.once('close', done);
  up.on('error', done);
  client.on('error', done);
  for (const p of preface) if (p.length) up.write(p);
  client.pipe(up).pipe(client);
}
