import { createHash } from 'node:crypto';
import { chmodSync, chownSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import path from 'node:path';
import { INSIDE, type Forwarding } from '../../net/forwarder.js';
import type { ServiceRow } from '../../store/metadata/types.js';
import { SANDBOX_ROOT } from '../../util/idmap.js';
import { linkAddresses, linkName } from './links.js';

/** The lines every sandbox's /etc/hosts starts with when it has links (the image's own). */
const HOSTS_HEAD = '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\nff02::1\t\tip6-allnodes\nff02::2\t\tip6-allrouters\n';

export type { Forwarding } from '../../net/forwarder.js';

/**
 * Services inside sandboxes: each sandbox of a context (its queries, its
 * services) runs `sbx-forward` first, which listens on 127.0.0.1:PORT for each
 * of the context's services, and on an address of its own in 127.64.0.0/10
 * for each service of another context shared with it (a link), and relays
 * connections to a Unix socket of this server (one per service, in a directory
 * per context that only the sandboxes' root can reach: a context can only
 * reach the sockets made for it), which wakes the service and pipes to it.
 * With links, the sandbox's /etc/hosts is a generated, read-only file naming
 * them (`{service}.{context}.internal`). Contexts with neither get none of this.
 */
export class ContextForwarding {
  /** Listening sockets by path: a context's own services and its links. */
  private readonly listeners = new Map<string, { server: Server; token: string }>();

  /** `join`: wakes the service (here, or on the worker of a cluster that runs it) and pipes the connection to it. */
  constructor(private readonly dir: string, private readonly join: (row: ServiceRow, inner: Socket) => Promise<void>) {
    mkdirSync(path.join(dir, 'ctx'), { recursive: true });
    chmodSync(dir, 0o711);
    chmodSync(path.join(dir, 'ctx'), 0o711);
  }

  private contextDir(row: { tenantId: string; context: string }): string {
    return path.join(this.dir, 'ctx', createHash('sha256').update(`${row.tenantId}/${row.context}`).digest('hex').slice(0, 20));
  }

  /**
   * What a sandbox of a context needs so that its `own` services (but
   * `except`) answer on 127.0.0.1 and its `links` at their names (null: nothing to do).
   */
  async forSandbox(viewer: { tenantId: string; context: string }, own: ServiceRow[], links: ServiceRow[], except?: string): Promise<Forwarding | null> {
    const others = own.filter((s) => s.name !== except);
    if (others.length === 0 && links.length === 0) return null;
    const dir = this.contextDir(viewer);
    for (const s of others) await this.listen(s, dir, `${s.spec.port}.sock`);
    for (const s of links) await this.listen(s, dir, `link-${s.token}.sock`);
    const binds: Forwarding['binds'] = [{ source: dir, target: `${INSIDE}/services` }];
    const pairs = others.map((s) => `${s.spec.port}=${INSIDE}/services/${s.spec.port}.sock`);
    if (links.length > 0) {
      const addresses = linkAddresses(links);
      pairs.push(...links.map((s) => `${addresses.get(s.token)}:${s.spec.port}=${INSIDE}/services/link-${s.token}.sock`));
      const names = [...own.map((s) => `127.0.0.1\t${linkName(s)}`), ...links.map((s) => `${addresses.get(s.token)}\t${linkName(s)}`)];
      binds.push({ source: this.hostsFile(dir, `${HOSTS_HEAD}${names.join('\n')}\n`), target: '/etc/hosts', readOnly: true });
    }
    return { binds, pairs };
  }

  /** The context's generated /etc/hosts, replaced (never rewritten in place: running sandboxes keep theirs) when it changes. */
  private hostsFile(dir: string, text: string): string {
    const file = path.join(dir, 'hosts');
    let current: string | null = null;
    try { current = readFileSync(file, 'utf8'); } catch { /* none yet */ }
    if (current !== text) {
      writeFileSync(`${file}.new`, text, { mode: 0o644 });
      renameSync(`${file}.new`, file);
    }
    return file;
  }

  private async listen(row: ServiceRow, dir: string, name: string): Promise<void> {
    const file = path.join(dir, name);
    if (this.listeners.has(file)) return;
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    chownSync(dir, SANDBOX_ROOT, SANDBOX_ROOT);
    rmSync(file, { force: true });
    const server = createServer((inner) => {
      inner.on('error', () => inner.destroy());
      this.join(row, inner).catch(() => inner.destroy());
    });
    this.listeners.set(file, { server, token: row.token });
    await new Promise<void>((resolve, reject) => { server.once('error', reject); server.listen(file, () => resolve()); });
    chownSync(file, SANDBOX_ROOT, SANDBOX_ROOT);
    chmodSync(file, 0o600);
  }

  /** The socket a context's sandboxes reach one of its own services at (listening once this resolves). */
  async ownSocket(viewer: { tenantId: string; context: string }, row: ServiceRow): Promise<string> {
    const dir = this.contextDir(viewer);
    await this.listen(row, dir, `${row.spec.port}.sock`);
    return path.join(dir, `${row.spec.port}.sock`);
  }

  /** The socket a context's sandboxes reach a linked service at (listening once this resolves). */
  async linkSocket(viewer: { tenantId: string; context: string }, row: ServiceRow): Promise<string> {
    const dir = this.contextDir(viewer);
    await this.listen(row, dir, `link-${row.token}.sock`);
    return path.join(dir, `link-${row.token}.sock`);
  }

  /** Stops answering for a service (deleted, or its sharing changed: links are made again as allowed) or all of them (shutdown). */
  close(token?: string): void {
    for (const [file, l] of this.listeners) {
      if (token !== undefined && l.token !== token) continue;
      l.server.close();
      rmSync(file, { force: true });
      this.listeners.delete(file);
    }
  }
}
