import { chmodSync, copyFileSync, mkdirSync, renameSync } from 'node:fs';
import path from 'node:path';
import { SBX_FORWARD } from '../util/native.js';

/** Where the forwarder and the server's sockets appear inside a sandbox (in its private /tmp). */
export const INSIDE = '/tmp/.shellbase';

export interface Bind { source: string; target: string; readOnly?: boolean }

/** `PORT>SOCKET` ports of a sandbox (runtime/types.ts, SandboxSpec.handOver). */
export interface HandOver { ports: string[]; forwarder: Bind }

/**
 * What a sandbox needs so that ports on its 127.0.0.1 reach the server: the
 * directories holding the server's Unix sockets, bound below INSIDE;
 * `[ADDR:]PORT=SOCKET` pairs for `sbx-forward` (native/forward.c), which binds each
 * port before the command starts and relays every connection to its socket (a
 * context's services, engine/services/forwarding.ts); and `PORT>SOCKET` ports whose
 * connections are handed whole to SOCKET (the egress proxy, net/egress.ts), which
 * the runtime serves itself where it can (a warm sandbox's pid 1). A sandbox gets them merged.
 */
export interface Forwarding {
  binds: Bind[];
  pairs: string[];
  handOver?: string[];
}

export function mergeForwarding(...parts: (Forwarding | null | undefined)[]): Forwarding | null {
  const given = parts.filter((p): p is Forwarding => !!p && (p.pairs.length > 0 || (p.handOver?.length ?? 0) > 0));
  if (given.length === 0) return null;
  return { binds: given.flatMap((p) => p.binds), pairs: given.flatMap((p) => p.pairs), handOver: given.flatMap((p) => p.handOver ?? []) };
}

/** The forwarder binary, copied into the data directory (the sandboxes' root can reach it there; the checkout may be in /root). */
export class Forwarder {
  private binary: string | null = null;

  constructor(private readonly dir: string) {}

  /** Its path: copied on first use (and again by each server start: a rebuilt binary replaces the old). */
  installed(): string {
    if (this.binary) return this.binary;
    mkdirSync(this.dir, { recursive: true, mode: 0o711 });
    chmodSync(this.dir, 0o711);
    const file = path.join(this.dir, 'sbx-forward');
    copyFileSync(SBX_FORWARD, `${file}.new`);
    chmodSync(`${file}.new`, 0o755);
    renameSync(`${file}.new`, file);
    return (this.binary = file);
  }

  /**
   * The binds and the argv prefix of a sandbox that runs its command behind `fwd`'s relays, and
   * its hand-over ports for the runtime (with the forwarder, for a sandbox that must start it).
   */
  wrap(fwd: Forwarding | null, argv: string[]): { argv: string[]; binds: Bind[]; handOver?: HandOver } {
    if (!fwd) return { argv, binds: [] };
    const forwarder = { source: this.installed(), target: `${INSIDE}/forward`, readOnly: true };
    const handOver = fwd.handOver?.length ? { ports: fwd.handOver, forwarder } : undefined;
    if (fwd.pairs.length === 0) return { argv, binds: fwd.binds, handOver };
    return { argv: [forwarder.target, ...fwd.pairs, '--', ...argv], binds: [forwarder, ...fwd.binds], handOver };
  }
}
