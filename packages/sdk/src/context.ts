import type { Socket } from 'node:net';
import { ContextHandle as CoreContextHandle } from './core/context.js';
import type { NodeTransport } from './transport.js';
import { listenTunnel, type LocalTunnel } from './tunnel.js';

export type { ExecOptions } from './core/context.js';

/** A context as Node's SDK sees it: the core's handle, with files read as Buffers and services reached over TCP. */
export class ContextHandle extends CoreContextHandle {
  declare protected readonly sb: NodeTransport;

  constructor(sb: NodeTransport, name: string, pinnedVersion?: string) {
    super(sb, name, pinnedVersion);
  }

  /** Files read and written straight from the layer store, with no sandbox. */
  override readonly files = {
    ...this.fileCalls(),
    read: async (p: string, options: { version?: string } = {}): Promise<Buffer> =>
      Buffer.from(await (await this.files.open(p, options)).arrayBuffer()),
  };

  /** Long-running processes over this context, on a gateway URL; they run only while used. */
  override readonly services = {
    ...this.serviceCalls(),
    /**
     * A local port that reaches the service's port over plain TCP (through the
     * API, with the API key; the service wakes on each connection), so a
     * database in a context answers `psql -h 127.0.0.1 -p PORT`.
     */
    connect: (name: string, options: { port?: number; host?: string; onError?: (e: unknown) => void } = {}): Promise<LocalTunnel> =>
      listenTunnel(() => this.sb.tunnel(this.connectPath(name)), options),
    /** One TCP connection to the service as a duplex stream (resolves once its port accepted). */
    stream: (name: string): Promise<Socket> => this.sb.tunnel(this.connectPath(name)),
  };

  private connectPath(name: string): string {
    return this.path(`/services/${encodeURIComponent(name)}/connect`);
  }
}
