import { createHash } from 'node:crypto';
import { chmodSync, chownSync, mkdirSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import path from 'node:path';
import { INSIDE, type Forwarding } from '../../net/forwarder.js';
import type { ServiceRow } from '../../store/metadata/types.js';
import { SANDBOX_ROOT } from '../../util/idmap.js';
import type { ServiceRun } from './run.js';

export type { Forwarding } from '../../net/forwarder.js';

/**
 * A context's services inside its own sandboxes: each sandbox of the context
 * (its queries, its other services) runs `sbx-forward` first, which listens on
 * 127.0.0.1:PORT for each service and passes connections to a Unix socket of
 * this server (one per service, in a directory per context that only the
 * sandboxes' root can reach), which wakes the service and pipes to it.
 * Contexts without services get none of this.
 */
export class ContextForwarding {
  private readonly listeners = new Map<string, Server>();

  constructor(private readonly dir: string, private readonly runOf: (row: ServiceRow) => ServiceRun) {
    mkdirSync(path.join(dir, 'ctx'), { recursive: true });
    chmodSync(dir, 0o711);
    chmodSync(path.join(dir, 'ctx'), 0o711);
  }

  private contextDir(row: { tenantId: string; context: string }): string {
    return path.join(this.dir, 'ctx', createHash('sha256').update(`${row.tenantId}/${row.context}`).digest('hex').slice(0, 20));
  }

  /** What a sandbox of the context needs so that `services` answer on 127.0.0.1 (null: nothing to do). */
  async forSandbox(services: ServiceRow[], except?: string): Promise<Forwarding | null> {
    const others = services.filter((s) => s.name !== except);
    if (others.length === 0) return null;
    const dir = this.contextDir(others[0]);
    for (const s of others) await this.listen(s, dir);
    return {
      binds: [{ source: dir, target: `${INSIDE}/services` }],
      pairs: others.map((s) => `${s.spec.port}=${INSIDE}/services/${s.spec.port}.sock`),
    };
  }

  private async listen(row: ServiceRow, dir: string): Promise<void> {
    if (this.listeners.has(row.token)) return;
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    chownSync(dir, SANDBOX_ROOT, SANDBOX_ROOT);
    const file = path.join(dir, `${row.spec.port}.sock`);
    rmSync(file, { force: true });
    const server = createServer((inner) => {
      inner.on('error', () => inner.destroy());
      this.runOf(row).pipe(inner).catch(() => inner.destroy());
    });
    this.listeners.set(row.token, server);
    await new Promise<void>((resolve, reject) => { server.once('error', reject); server.listen(file, () => resolve()); });
    chownSync(file, SANDBOX_ROOT, SANDBOX_ROOT);
    chmodSync(file, 0o600);
  }

  /** Stops answering for a service (deleted) or all of them (shutdown). */
  close(token?: string): void {
    for (const [t, server] of this.listeners) {
      if (token !== undefined && t !== token) continue;
      server.close();
      this.listeners.delete(t);
    }
  }
}
