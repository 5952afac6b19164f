import { constants } from 'node:os';
import { GUEST_AGENT, type Agent } from '../../machines/index.js';
import { StartError, errnoName, type Attached, type SpawnHandlers, type StartOptions } from '../../util/spawner.js';
import { ConnectError, type ConnectCode } from './connect.js';

/** E2B's default user: uid 1000, home /home/user, passwordless sudo. */
export const DEFAULT_USER = 'user';

/**
 * Made in the guest when the image lacks it (the debian image has it): with
 * uid 1000 when free, and a sudoers line where sudo is installed. Idempotent, and safe to race.
 */
const MAKE_DEFAULT_USER = `id -u ${DEFAULT_USER} >/dev/null 2>&1 && exit 0
useradd --create-home --uid 1000 --user-group --shell /bin/bash ${DEFAULT_USER} 2>/dev/null || useradd --create-home --shell /bin/bash ${DEFAULT_USER} 2>/dev/null
if [ -d /etc/sudoers.d ]; then echo '${DEFAULT_USER} ALL=(ALL:ALL) NOPASSWD: ALL' > /etc/sudoers.d/90-e2b-user && chmod 440 /etc/sudoers.d/90-e2b-user; fi
id -u ${DEFAULT_USER} >/dev/null`;

const CODE_OF: Record<string, ConnectCode> = {
  ENOENT: 'not_found', EEXIST: 'already_exists', EACCES: 'permission_denied', EPERM: 'permission_denied',
  ENOTDIR: 'invalid_argument', EISDIR: 'invalid_argument', EINVAL: 'invalid_argument', ENAMETOOLONG: 'invalid_argument',
  ELOOP: 'invalid_argument', ERANGE: 'invalid_argument', E2BIG: 'invalid_argument', ENOSPC: 'resource_exhausted', EDQUOT: 'resource_exhausted',
  ENOTEMPTY: 'failed_precondition', EXDEV: 'failed_precondition', ENOTSUP: 'failed_precondition', EOPNOTSUPP: 'failed_precondition',
};

/** Makes the default user in a guest that lacks it (MAKE_DEFAULT_USER). */
async function makeDefaultUser(agent: Agent): Promise<void> {
  const made = await collect(agent, { argv: ['sh', '-c', MAKE_DEFAULT_USER] });
  if (made.code !== 0) throw new ConnectError('failed_precondition', `the sandbox has no user ${DEFAULT_USER} and making one failed: ${made.stderr.trim()}`);
}

/** An errno (of a guest operation) as the Connect error the SDK expects. */
export function errnoError(errno: number, message: string): ConnectError {
  return new ConnectError(CODE_OF[errnoName(errno)] ?? 'internal', message);
}

/**
 * Starts a process of the agent's table as `opts.user`. The default user is made on first use
 * when the guest lacks it; a user, cwd or program that is not there is a typed error.
 */
export async function startAs(agent: Agent, opts: StartOptions, handlers: SpawnHandlers): Promise<Attached> {
  for (let attempt = 0; ; attempt++) {
    const p = agent.spawner.startWith(opts, handlers);
    try {
      await p.pid;
      return p;
    } catch (e) {
      if (!(e instanceof StartError)) throw e;
      if (e.stage === 'user' && e.errno === constants.errno.ENOENT && opts.user === DEFAULT_USER && attempt === 0) {
        await makeDefaultUser(agent);
        continue;
      }
      if (e.stage === 'user') throw new ConnectError('invalid_argument', `the sandbox has no user ${JSON.stringify(opts.user)}`);
      if (e.stage === 'cwd') throw new ConnectError('invalid_argument', `cwd ${JSON.stringify(opts.cwd)}: ${errnoName(e.errno)}`);
      if (e.stage === 'exec') throw new ConnectError(e.errno === constants.errno.ENOENT ? 'not_found' : 'invalid_argument', `${opts.argv[0]}: ${errnoName(e.errno)}`);
      throw new ConnectError('internal', e.message);
    }
  }
}

export interface Collected { code: number; stdout: Buffer; stderr: string }

/** Runs a process to its end and collects its output (stdout up to `maxStdout` bytes, else resource_exhausted). */
export async function collect(agent: Agent, opts: StartOptions & { input?: AsyncIterable<Buffer> }, maxStdout = 64 << 20): Promise<Collected> {
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  let size = 0;
  let over = false;
  let proc: Attached | undefined;
  const p = proc = await startAs(agent, { ...opts, stdin: opts.input !== undefined }, {
    onStdout: (c) => { size += c.length; if (size > maxStdout) { if (!over) proc?.kill(); over = true; } else out.push(Buffer.from(c)); },
    onStderr: (c) => { if (err.length < 64) err.push(Buffer.from(c)); },
  });
  if (over) p.kill();
  // Input that cannot be written (the process failed, or the body broke off): the process's own
  // error when it reported one, else the input's.
  let fed: unknown = null;
  if (opts.input) await agent.feed(await p.pid, opts.input).catch((e: unknown) => { fed = e; p.kill(); });
  const exit = await p.exited;
  if (over) throw new ConnectError('resource_exhausted', `output larger than ${maxStdout} bytes`);
  const stderr = Buffer.concat(err).toString();
  if (fed !== null && !(exit.code !== 0 && /^E\d+\n/.test(stderr))) throw fed;
  return { code: exit.code ?? 128, stdout: Buffer.concat(out), stderr };
}

/** An entry of `--fs` (native/fsops.c): a symlink as envd describes one (its target's kind and mode, the resolved target). */
export interface GuestEntry {
  kind: 'file' | 'dir' | 'other';
  size: number;
  mode: number;
  permissions: string;
  owner: string;
  group: string;
  mtime: { seconds: number; nanos: number };
  path: string;
  name: string;
  target?: string;
  /** envd's file metadata: the entry's `user.e2b.*` xattrs, the prefix left out. */
  metadata: Record<string, string>;
}

const KINDS = { f: 'file', d: 'dir', o: 'other' } as const;

/** The fields of one entry. */
export const ENTRY_FIELDS = 11;

/** One entry from its ENTRY_FIELDS fields. */
export function entryOf(f: string[]): GuestEntry {
  const p = f[8];
  const metadata: Record<string, string> = {};
  for (const pair of f[10] ? f[10].split('\x1e') : []) {
    const at = pair.indexOf('\x1f');
    if (at > 0) metadata[pair.slice(0, at)] = pair.slice(at + 1);
  }
  return {
    kind: KINDS[f[0] as keyof typeof KINDS] ?? 'other', size: Number(f[1]), mode: Number(f[2]), permissions: f[3],
    owner: f[4], group: f[5], mtime: { seconds: Number(f[6]), nanos: Number(f[7]) },
    path: p, name: p === '/' ? '/' : p.slice(p.lastIndexOf('/') + 1), ...(f[9] ? { target: f[9] } : {}), metadata,
  };
}

/** Parses `--fs` output: entries of ENTRY_FIELDS NUL-terminated fields. */
export function parseEntries(out: Buffer): GuestEntry[] {
  const f = out.toString('utf8').split('\0');
  const entries: GuestEntry[] = [];
  for (let i = 0; i + ENTRY_FIELDS <= f.length; i += ENTRY_FIELDS) entries.push(entryOf(f.slice(i, i + ENTRY_FIELDS)));
  return entries;
}

/** How `--fs` exits when the user it is run for (`-u`) does not exist. */
const NO_USER = 3;

/** Users known to exist in a guest (its agent's), so that `fsOp` need not ask again. */
const knownUsers = new WeakMap<Agent, Set<string>>();

/** Makes sure `user` exists in the guest (startAs makes the default one), once per agent. */
async function ensureUser(agent: Agent, user: string): Promise<void> {
  const known = knownUsers.get(agent) ?? new Set<string>();
  if (known.has(user)) return;
  await collect(agent, { argv: ['true'], user });
  known.add(user);
  knownUsers.set(agent, known);
}

/**
 * Runs `sbx-spawner --fs OP ARGS` for `user`; its entries, or the typed error its errno names.
 * `makesDirs` (mkdir, move, write): run as root with `-u user`, so that the missing directories
 * it needs are made and given to the user wherever they go, as envd makes them (the rest runs
 * with the user's permissions all the same).
 */
export async function fsOp(agent: Agent, user: string, args: string[], input?: AsyncIterable<Buffer>, makesDirs = false): Promise<GuestEntry[]> {
  const owned = makesDirs && user !== 'root';
  if (owned) await ensureUser(agent, user);
  const argv = [GUEST_AGENT, '--fs', ...(owned ? ['-u', user] : []), ...args];
  const r = await collect(agent, { argv, user: owned ? 'root' : user, ...(input ? { input } : {}) });
  if (owned && r.code === NO_USER) throw new ConnectError('invalid_argument', `the sandbox has no user ${JSON.stringify(user)}`);
  if (r.code !== 0) throw fsError(r.stderr);
  return parseEntries(r.stdout);
}

/** `E<errno>\n<message>` (native/fsops.c, watch.c) as a typed error. */
export function fsError(stderr: string): ConnectError {
  const m = /^E(\d+)\n([^]*)$/.exec(stderr);
  if (!m) return new ConnectError('internal', stderr.trim() || 'the guest operation failed');
  return errnoError(Number(m[1]), m[2].trim());
}
