import { createHash } from 'node:crypto';
import { chmodSync, existsSync, lchownSync, linkSync, mkdirSync, renameSync, rmSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { LayerReader, Snapshotter } from '../store/snapshotter/types.js';
import { directoryUsable, lookup } from './stack.js';
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
 *   (only those when the context has none; none at all when the context's is a link into another
 *   store or past 16 MiB, which stay as they are);
 * - `/etc/ssl/certs/HASH.N`: a link per authority (OpenSSL's hashed lookup), N past the context's own;
 * - `TRUST_DIR`: `authority-I.pem` each, `authorities.pem` all of them (NODE_EXTRA_CA_CERTS adds
 *   those to Node's own), `bundle.pem` the whole bundle (SSL_CERT_FILE, REQUESTS_CA_BUNDLE,
 *   PIP_CERT, GIT_SSL_CAINFO: set only when the context has a bundle of its own that the overlay
 *   extends, since they replace a runtime's store); also `env.sh`, which `/etc/profile.d/shellbase-ca.sh` sources for login
 *   shells, and a systemd drop-in giving the same variables to a machine's units.
 * Where the stack has `/etc/ssl/certs` as a link (RHEL's into /etc/pki), nothing is put there: only
 * `TRUST_DIR` and the variables that add to a store. Each directory the overlay has takes the
 * owner, mode and times the stack gives it (a directory of the overlay's own is root's, 0755), so
 * the sandbox sees the context's, and a write below copies it up unchanged. A command that rebuilds
 * the store in a sandbox (`update-ca-certificates`) writes the context's own again; one that appends
 * to `ca-certificates.crt` copies up the overlay's file, the host's authorities in it.
 */
export class TrustLayers {
  private readonly stacks = new Map<string, TrustOverlay>();
  private readonly making = new Map<string, Promise<void>>();

  constructor(private readonly o: { authorities: HostAuthorities | null; snapshotter: Snapshotter; dir: string }) {}

  /**
   * What a sandbox over `layers` gets of the host's authorities: the overlay above its layers and
   * their variables under `env` (the command's own win); `env` alone when the host adds nothing.
   */
  async forSandbox(layers: readonly string[], env: Record<string, string>): Promise<{ env: Record<string, string>; overlays?: string[] }> {
    const trust = await this.forLayers(layers);
    return trust ? { env: { ...trust.env, ...env }, overlays: [trust.dir] } : { env };
  }

  /** The overlay for a stack of layers (bottom first; every one present on this host), or null when the host adds nothing. */
  async forLayers(layers: readonly string[]): Promise<TrustOverlay | null> {
    if (!this.o.authorities) return null;
    const set = await this.o.authorities.get();
    if (set.authorities.length === 0) return null;
    const stackKey = `${set.fingerprint}|${layers.join(':')}`;
    const known = this.stacks.get(stackKey);
    if (known !== undefined) return known;
    // A new version over a known one whose layer touches neither /etc nor /usr (most queries'
    // writes) has the same overlay: no lookup through the stack.
    const below = this.stacks.get(`${set.fingerprint}|${layers.slice(0, -1).join(':')}`);
    if (below !== undefined && layers.length > 1 && untouched(await this.o.snapshotter.reader(layers[layers.length - 1]!))) {
      this.remember(stackKey, below);
      return below;
    }
    const readers = await Promise.all([...layers].reverse().map((id) => this.o.snapshotter.reader(id)));
    const plan = planOf(readers, set.authorities);
    const key = createHash('sha256').update(JSON.stringify({ format: 2, set: set.fingerprint, ...plan.shape })).digest('hex').slice(0, 16);
    const dir = path.join(this.o.dir, key);
    if (!existsSync(dir)) {
      let p = this.making.get(dir);
      if (!p) {
        p = Promise.resolve().then(() => make(dir, set.authorities, plan)).finally(() => this.making.delete(dir));
        this.making.set(dir, p);
      }
      await p;
    }
    const overlay: TrustOverlay = { dir, env: plan.env, key };
    this.remember(stackKey, overlay);
    return overlay;
  }

  private remember(stackKey: string, overlay: TrustOverlay): void {
    if (this.stacks.size >= 1000) this.stacks.delete(this.stacks.keys().next().value!);
    this.stacks.set(stackKey, overlay);
  }
}

/** Whether a layer leaves everything the overlay looks at as the layers below have it. */
function untouched(top: LayerReader): boolean {
  return !top.opaque.has('') && top.stat('etc') === null && top.stat('usr') === null;
}

/** The most of a context's bundle the server reads to add to (a larger one is left as it is). */
const MAX_BUNDLE_BYTES = 16 << 20;

/** A directory's attributes as the overlay gives it (host ids, as layers store them). */
interface DirAttrs { mode: number; uid: number; gid: number; mtimeMs: number }

/** What an overlay holds over one stack: `shape` names it (with the set of authorities). */
interface Plan {
  /** The context's bundle to extend, `absent` (the authorities are the whole bundle), or `kept` (none written). */
  bundle: LayerReader | 'absent' | 'kept';
  /** `HASH.N` per authority; empty where `/etc/ssl/certs` is not a directory the overlay may have. */
  links: string[];
  /** Which of the machine-side files go in (`/etc/profile.d`, the systemd drop-in). */
  profile: boolean;
  systemd: boolean;
  dirs: Record<string, DirAttrs>;
  env: Record<string, string>;
  shape: Record<string, unknown>;
}

const TRUST_REL = TRUST_DIR.slice(1);
const PROFILE = 'etc/profile.d/shellbase-ca.sh';
const DROP_IN = 'etc/systemd/system.conf.d/shellbase-ca.conf';

function planOf(readers: LayerReader[], authorities: readonly Authority[]): Plan {
  const certs = directoryUsable(readers, HASHED_DIR);
  const found = certs ? lookup(readers, SYSTEM_BUNDLE) : 'blocked';
  const bundle: Plan['bundle'] = found === 'absent' ? 'absent'
    : found !== 'blocked' && found.stat.kind === 'file' && found.stat.size <= MAX_BUNDLE_BYTES ? found.reader : 'kept';
  const taken = new Set<string>();
  const links = certs ? authorities.map((a) => {
    for (let n = 0; ; n++) {
      const name = `${a.subjectHash}.${n}`;
      if (taken.has(name) || lookup(readers, `${HASHED_DIR}/${name}`) !== 'absent') continue;
      taken.add(name);
      return name;
    }
  }) : [];
  const profile = directoryUsable(readers, path.dirname(PROFILE));
  const systemd = directoryUsable(readers, path.dirname(DROP_IN));
  const wanted = [TRUST_REL, ...(certs ? [HASHED_DIR] : []), ...(profile ? [path.dirname(PROFILE)] : []), ...(systemd ? [path.dirname(DROP_IN)] : [])];
  const dirs: Record<string, DirAttrs> = {};
  for (const w of wanted) {
    const parts = w.split('/');
    for (let i = 1; i <= parts.length; i++) {
      const rel = parts.slice(0, i).join('/');
      if (dirs[rel]) continue;
      const e = lookup(readers, rel);
      dirs[rel] = e !== 'absent' && e !== 'blocked' && e.stat.kind === 'dir'
        ? { mode: e.stat.mode, uid: e.stat.uid, gid: e.stat.gid, mtimeMs: e.stat.mtimeMs }
        : { mode: 0o755, uid: SANDBOX_ROOT, gid: SANDBOX_ROOT, mtimeMs: 0 };
    }
  }
  const env = envFor(typeof bundle !== 'string');
  const shape = { bundle: typeof bundle === 'string' ? bundle : bundle.layerId, links, profile, systemd, dirs };
  return { bundle, links, profile, systemd, dirs, env, shape };
}

/** The variables a command gets (where unset) with the host's authorities: those that replace a store only where the overlay extends the context's. */
function envFor(extendsBundle: boolean): Record<string, string> {
  const env: Record<string, string> = { NODE_EXTRA_CA_CERTS: `${TRUST_DIR}/authorities.pem` };
  if (extendsBundle) {
    for (const k of ['SSL_CERT_FILE', 'REQUESTS_CA_BUNDLE', 'PIP_CERT', 'GIT_SSL_CAINFO']) env[k] = `${TRUST_DIR}/bundle.pem`;
  }
  return env;
}

function make(dir: string, authorities: readonly Authority[], plan: Plan): void {
  const tmp = `${dir}.${process.pid}.${Math.random().toString(36).slice(2)}`;
  const at = (rel: string) => path.join(tmp, rel);
  const write = (rel: string, content: string | Buffer) => {
    writeFileSync(at(rel), content);
    chmodSync(at(rel), 0o644);
    lchownSync(at(rel), SANDBOX_ROOT, SANDBOX_ROOT);
  };
  try {
    mkdirSync(path.dirname(dir), { recursive: true });
    mkdirSync(tmp, { mode: 0o755 });
    // Directories parents first; their attributes once everything below them is written (times last).
    const dirs = Object.keys(plan.dirs).sort();
    for (const rel of dirs) mkdirSync(at(rel));
    const extras = authorities.map((a) => a.pem).join('');
    const own = typeof plan.bundle === 'string' ? null : plan.bundle.readAll(SYSTEM_BUNDLE);
    const whole = own ? Buffer.concat([own, Buffer.from(own.length && own[own.length - 1] !== 0x0a ? '\n' : ''), Buffer.from(extras)]) : Buffer.from(extras);
    authorities.forEach((a, i) => write(`${TRUST_REL}/authority-${i}.pem`, a.pem));
    write(`${TRUST_REL}/authorities.pem`, extras);
    write(`${TRUST_REL}/bundle.pem`, whole);
    if (plan.bundle !== 'kept') linkSync(at(`${TRUST_REL}/bundle.pem`), at(SYSTEM_BUNDLE)); // one copy on disk
    plan.links.forEach((name, i) => {
      symlinkSync(`${TRUST_DIR}/authority-${i}.pem`, at(`${HASHED_DIR}/${name}`));
      lchownSync(at(`${HASHED_DIR}/${name}`), SANDBOX_ROOT, SANDBOX_ROOT);
    });
    const exports = Object.entries(plan.env).map(([k, v]) => `[ -n "\${${k}:-}" ] || export ${k}=${v}`).join('\n');
    write(`${TRUST_REL}/env.sh`, `# The host's TLS authorities (shellbase): for runtimes that keep their own store, where unset.\n${exports}\n`);
    if (plan.profile) write(PROFILE, `. ${TRUST_DIR}/env.sh\n`);
    if (plan.systemd) write(DROP_IN, `[Manager]\nDefaultEnvironment=${Object.entries(plan.env).map(([k, v]) => `"${k}=${v}"`).join(' ')}\n`);
    for (const rel of [...dirs].reverse()) {
      const a = plan.dirs[rel]!;
      lchownSync(at(rel), a.uid, a.gid);
      chmodSync(at(rel), a.mode);
      if (a.mtimeMs) utimesSync(at(rel), a.mtimeMs / 1000, a.mtimeMs / 1000);
    }
    lchownSync(tmp, SANDBOX_ROOT, SANDBOX_ROOT);
    chmodSync(tmp, 0o755);
    try {
      renameSync(tmp, dir);
    } catch (e) {
      rmSync(tmp, { recursive: true, force: true });
      if (!existsSync(dir)) throw e; // not another server having made it first
    }
  } catch (e) {
    rmSync(tmp, { recursive: true, force: true });
    throw e;
  }
}
