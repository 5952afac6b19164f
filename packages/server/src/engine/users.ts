import type { ContextDefaults } from '@shellbase/protocol';
import { invalid } from '../errors.js';
import type { SandboxUser } from '../runtime/types.js';
import type { VersionView } from './files/view.js';

/** A Dockerfile USER: `name`, `name:group`, `uid` or `uid:gid`. */
const USER_SPEC = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,63})?$/;
const MAX_ID = 65535;

/** Refuses a user that is not one (400); returns it. */
export function checkUser(user: string): string {
  if (typeof user !== 'string' || !USER_SPEC.test(user)) {
    throw invalid(`invalid user ${JSON.stringify(user)}`, 'pass root, a user name of the context (name or name:group) or ids (uid or uid:gid)');
  }
  return user;
}

/** The lines of a colon-separated file of the version (/etc/passwd, /etc/group), [] when it has none. */
function table(view: VersionView, path: string): string[][] {
  const e = view.find(path.slice(1).split('/'));
  if (!e || e.type !== 'file' || e.stat.size > 4 << 20) return [];
  return view.readAll(e).toString('utf8').split('\n').filter((l) => l && !l.startsWith('#')).map((l) => l.split(':'));
}

const numeric = (s: string) => /^\d+$/.test(s);

function id(s: string, what: string): number {
  const n = Number(s);
  if (!Number.isInteger(n) || n < 0 || n > MAX_ID) throw invalid(`${what} ${s} is out of range`, `ids inside a sandbox are 0-${MAX_ID}`);
  return n;
}

export interface ResolvedUser {
  /** Null for root with root's group: nothing to switch. */
  user: SandboxUser | null;
  /** The user's home from /etc/passwd (HOME unless the environment sets one). */
  home?: string;
}

/**
 * Resolves a USER against a version's /etc/passwd and /etc/group, as Docker
 * does: a name must be there; numeric ids need not be (gid 0 then); the
 * supplementary groups are those /etc/group lists the user in.
 */
export function resolveUser(view: VersionView, spec: string): ResolvedUser {
  const [name, group] = checkUser(spec).split(':');
  const passwd = table(view, '/etc/passwd');
  const entry = numeric(name) ? passwd.find((p) => p[2] === name) : passwd.find((p) => p[0] === name);
  if (!entry && !numeric(name)) {
    throw invalid(`user ${JSON.stringify(name)} is not in the context's /etc/passwd`, 'create the user first (useradd), or pass a numeric uid');
  }
  const uid = id(entry?.[2] ?? name, 'uid');
  const groups = table(view, '/etc/group');
  let gid = id(entry?.[3] ?? '0', 'gid');
  if (group !== undefined) {
    const g = numeric(group) ? undefined : groups.find((x) => x[0] === group);
    if (!g && !numeric(group)) throw invalid(`group ${JSON.stringify(group)} is not in the context's /etc/group`, 'create the group first, or pass a numeric gid');
    gid = id(g?.[2] ?? group, 'gid');
  }
  const userName = entry?.[0];
  const extra = group !== undefined || userName === undefined ? [] : groups
    .filter((g) => (g[3] ?? '').split(',').includes(userName) && numeric(g[2] ?? ''))
    .map((g) => id(g[2], 'gid'));
  const home = entry?.[5] || undefined;
  if (uid === 0 && gid === 0 && extra.length === 0) return { user: null, ...(home ? { home } : {}) };
  return { user: { uid, gid, groups: [...new Set([gid, ...extra])] }, ...(home ? { home } : {}) };
}

/** What a request asks of a sandbox besides its command. */
export interface RunRequest {
  env?: Record<string, string>;
  cwd?: string;
  user?: string;
}

export interface RunAs {
  env: Record<string, string>;
  cwd: string;
  user?: SandboxUser;
  /** `bash -c` becomes `/bin/sh -c` in an image without bash. */
  argv: string[];
}

/**
 * What a sandbox of a context runs with, a query's or a service's: the
 * request's environment over the context's defaults, its cwd (else the
 * context's, else /root), its user (else the context's, else root). A command
 * given as a string runs with bash -c, or /bin/sh -c in an image without bash
 * (looked up only for contexts of pulled images). The version's files are
 * read only when a user or a shell has to be looked up.
 */
export async function runAs(argv: string[], fromString: boolean, req: RunRequest, defaults: ContextDefaults | undefined,
  view: () => Promise<VersionView>, builtInImage: boolean): Promise<RunAs> {
  const env = { ...(defaults?.env ?? {}), ...(req.env ?? {}) };
  const cwd = req.cwd ?? defaults?.cwd ?? '/root';
  const spec = req.user ?? defaults?.user;
  let out: RunAs = { env, cwd, argv };
  let v: VersionView | null = null;
  if (spec !== undefined && spec !== 'root' && spec !== '0' && spec !== '0:0') {
    v = await view();
    const { user, home } = resolveUser(v, spec);
    if (user) out = { ...out, user };
    if (home && env.HOME === undefined) out.env = { ...env, HOME: home };
  }
  if (fromString && !builtInImage && argv[0] === 'bash') {
    v ??= await view();
    if (!v.find(['bin', 'bash'])) out.argv = ['/bin/sh', ...argv.slice(1)];
  }
  return out;
}
