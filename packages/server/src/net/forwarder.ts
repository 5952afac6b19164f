import { chmodSync, copyFileSync, mkdirSync, renameSync } from 'node:fs';
import path from 'node:path';
import { SBX_FORWARD } from '../util/native.js';

/** Where the forwarder and the server's sockets appear inside a sandbox (in its private /tmp). */
export const INSIDE = '/tmp/.shellbase';

export interface Bind { source: string; target: string; readOnly?: boolean }

/**
 * What a sandbox needs so that ports on its 127.0.0.1 reach the server: the
 * directories holding the server's Unix sockets, bound below INSIDE, and
 * `PORT=SOCKET` pairs for `sbx-forward` (native/forward.c), which binds each
 * port before the command starts and relays every connection to its socket.
 * A context's services (engine/services/forwarding.ts) and the egress proxy
 * (net/egress.ts) each give one; a sandbox gets them merged.
 */
export interface Forwarding {
  binds: Bind[];
  pairs: string[];
}

export function mergeForwarding(...parts: (Forwarding | null | undefined)[]): Forwarding | null {
  const given = parts.filter((p): p is Forwarding => !!p && p.pairs.length > 0);
  if (given.length === 0) return null;
  return { binds: given.flatMap((p) => p.binds), pairs: given.flatMap((p) => p.pairs) };
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

  /** The binds and the argv prefix of a sandbox that runs its command behind `fwd`. */
  wrap(fwd: Forwarding | null, argv: string[]): { argv: string[]; binds: Bind[] } {
    if (!fwd) return { argv, binds: [] };
    const binary = this.installed();
    return {
      argv: [`${INSIDE}/forward`, ...fwd.pairs, '--', ...argv],
      binds: [{ source: binary, target: `${INSIDE}/forward`, readOnly: true }, ...fwd.binds],
    };
  }
}
