import { createHash } from 'node:crypto';
import { chownSync, existsSync, lchownSync, mkdirSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { LayerReader, Snapshotter } from '../store/snapshotter/types.js';
import { SANDBOX_ROOT } from '../util/idmap.js';
import type { Authority, HostAuthorities } from './authorities.js';

/**
 * The host's authorities as a sandbox or a machine sees them: a directory in overlay format,
 * stacked above a context's layers (never below its writes, so never part of a version), and the
 * variables for the runtimes that keep their own store.
 */
export interface TrustOverlay {
  /** Host path of the directory (entries owned by the sandboxes' root). */
  dir: string;
  /** Set where the command's own environment leaves them unset. */
  env: Record<string, string>;
  /** Names what the directory holds (a machine template built over it is keyed by it). */
  key: string;
}

/** Where the overlay puts the authorities: a directory `update-ca-certificates` does not read. */
export const TRUST_DIR = '/usr/local/share/shellbase/ca';
const SYSTEM_BUNDLE = 'etc/ssl/certs/ca-certificates.crt';
const HASHED_DIR = 'etc/ssl/certs';

/**
 * What the overlay holds, over a context whose system store is `/etc/ssl/certs` (Debian's and
 * most images'), as `update-ca-certificates` would make it with the host's authorities added:
 * - `/etc/ssl/certs/ca-certificates.crt`: the context's own bundle, then the host's authorities
 *   (only those when the context has none);
 * - `/etc/ssl/certs/HASH.N`: a link per authority (OpenSSL's hashed lookup), N past the context's own;
 * - `TRUST_DIR`: `authority-I.pem` each, `authorities.pem` all of them (NODE_EXTRA_CA_CERTS adds
 *   those to Node's own), `bundle.pem` the whole bundle (SSL_CERT_FILE, REQUESTS_CA_BUNDLE,
 *   PIP_CERT, GIT_SSL_CAINFO: set only when the context has a bundle of its own, since they replace
 *   a runtime's store); also `env.sh`, which `/etc/profile.d/shellbase-ca.sh` sources for login
 *   shells, and a systemd drop-in giving the same variables to a machine's units.
 * A command that rebuilds the store in a sandbox (`update-ca-certificates`) writes the context's own
 * again; the variables keep pointing at `TRUST_DIR` for the rest of that command.
 */
export class TrustLayers {
  private readonly stacks = new Map<string, TrustOverlay | null>();
  private readonly making = new Map<string, Promise<void>>();

  constructor(private readonly o: { authorities: HostAuthorities | null; snapshotter: Snapshotter; dir: string }) {}

  /** The overlay for a stack of layers (bottom first; every one present on this host), or null when the host adds nothing. */
  async forLayers(layers: readonly string[]): Promise<TrustOverlay | null> {
    if (!this.o.authorities) return null;
    const set = await this.o.authorities.get();
    if (set.authorities.length === 0) return null;
    const stackKey = `${set.fingerprint}|${layers.join(':')}`;
    const known = this.stacks.get(stackKey);
    if (known !== undefined) return known;
    const readers = await Promise.all([...layers].reverse().map((id) => this.o.snapshotter.reader(id)));
    const bundleAt = find(readers, SYSTEM_BUNDLE);
    const links = linkNames(readers, set.authorities);
    const bundleId = bundleAt ? bundleAt.layerId : 'none';
    const key = createHash('sha256').update(JSON.stringify({ format: 1, set: set.fingerprint, bundle: bundleId, links })).digest('hex').slice(0, 16);
    const dir = path.join(this.o.dir, key);
    const env = envFor(bundleAt !== null);
    if (!existsSync(dir)) {
      let p = this.making.get(dir);
      if (!p) {
        p = Promise.resolve().then(() => make(dir, set.authorities, links, bundleAt?.readAll(SYSTEM_BUNDLE) ?? null, env))
          .finally(() => this.making.delete(dir));
        this.making.set(dir, p);
      }
      await p;
    }
    const overlay: TrustOverlay = { dir, env, key };
    if (this.stacks.size >= 1000) this.stacks.delete(this.stacks.keys().next().value!);
    this.stacks.set(stackKey, overlay);
    return overlay;
  }
}

/** The variables a command gets (where unset) with the host's authorities. */
function envFor(hasBundle: boolean): Record<string, string> {
  const env: Record<string, string> = { NODE_EXTRA_CA_CERTS: `${TRUST_DIR}/authorities.pem` };
  if (hasBundle) {
    for (const k of ['SSL_CERT_FILE', 'REQUESTS_CA_BUNDLE', 'PIP_CERT', 'GIT_SSL_CAINFO']) env[k] = `${TRUST_DIR}/bundle.pem`;
  }
  return env;
}

/** The top layer (of `readers`, top first) whose entry `rel` is the stack's, or null when the stack has none. */
function find(readers: LayerReader[], rel: string): LayerReader | null {
  const parts = rel.split('/');
  for (const r of readers) {
    const s = r.stat(rel);
    if (s) return s.kind === 'file' ? r : null; // a whiteout, or something else in its place, hides the rest
    for (let i = 1; i < parts.length; i++) {
      const at = parts.slice(0, i).join('/');
      const up = r.stat(at);
      if (!up) break; // this layer has nothing on the way: the layers below decide
      if (up.kind !== 'dir' || r.opaque.has(at)) return null; // hides everything below
    }
  }
  return null;
}

/** `HASH.N` for each authority: the first N the stack (or an earlier authority) does not use. */
function linkNames(readers: LayerReader[], authorities: readonly Authority[]): string[] {
  const taken = new Set<string>();
  return authorities.map((a) => {
    for (let n = 0; ; n++) {
      const name = `${a.subjectHash}.${n}`;
      if (taken.has(name) || find(readers, `${HASHED_DIR}/${name}`)) continue;
      taken.add(name);
      return name;
    }
  });
}

function make(dir: string, authorities: readonly Authority[], links: string[], bundle: Buffer | null, env: Record<string, string>): void {
  const tmp = `${dir}.${process.pid}.${Math.random().toString(36).slice(2)}`;
  const own = (p: string) => lchownSync(p, SANDBOX_ROOT, SANDBOX_ROOT);
  const mkdirs = (rel: string) => {
    let at = tmp;
    for (const part of ['', ...rel.split('/')]) {
      at = path.join(at, part);
      if (!existsSync(at)) { mkdirSync(at, { mode: 0o755 }); own(at); }
    }
  };
  const write = (rel: string, content: string | Buffer) => {
    mkdirs(path.dirname(rel));
    writeFileSync(path.join(tmp, rel), content, { mode: 0o644 });
    own(path.join(tmp, rel));
  };
  try {
    mkdirSync(path.dirname(dir), { recursive: true });
    const extras = authorities.map((a) => a.pem).join('');
    const whole = bundle ? Buffer.concat([bundle, Buffer.from(bundle.length && bundle[bundle.length - 1] !== 0x0a ? '\n' : ''), Buffer.from(extras)]) : Buffer.from(extras);
    const trustRel = TRUST_DIR.slice(1);
    authorities.forEach((a, i) => write(`${trustRel}/authority-${i}.pem`, a.pem));
    write(`${trustRel}/authorities.pem`, extras);
    write(`${trustRel}/bundle.pem`, whole);
    write(SYSTEM_BUNDLE, whole);
    links.forEach((name, i) => {
      const link = path.join(tmp, HASHED_DIR, name);
      symlinkSync(`${TRUST_DIR}/authority-${i}.pem`, link);
      own(link);
    });
    const exports = Object.entries(env).map(([k, v]) => `[ -n "\${${k}:-}" ] || export ${k}=${v}`).join('\n');
    write(`${trustRel}/env.sh`, `# The host's TLS authorities (shellbase): for runtimes that keep their own store, where unset.\n${exports}\n`);
    write('etc/profile.d/shellbase-ca.sh', `. ${TRUST_DIR}/env.sh\n`);
    write('etc/systemd/system.conf.d/shellbase-ca.conf',
      `[Manager]\nDefaultEnvironment=${Object.entries(env).map(([k, v]) => `"${k}=${v}"`).join(' ')}\n`);
    chownSync(tmp, SANDBOX_ROOT, SANDBOX_ROOT);
    try { renameSync(tmp, dir); } catch { rmSync(tmp, { recursive: true, force: true }); } // another server made it
  } catch (e) {
    rmSync(tmp, { recursive: true, force: true });
    throw e;
  }
}
