import { createHash } from 'node:crypto';
import { readFileSync, statSync } from 'node:fs';
import { Readable } from 'node:stream';
import type { Mount } from '@shellbase/protocol';
import { ShellbaseError, invalid, notFound } from '../errors.js';
import type { Caller, Deps } from '../core/deps.js';
import type { ContextAccess } from '../core/contexts.js';
import { checkMounts } from '../core/mounts.js';
import type { MachineMount } from '../store/metadata/types.js';
import { newId } from '../util/ids.js';
import type { Vm } from './vm/types.js';
import { helperOutput } from './storage/disk.js';

/** The most a mount's changes out of a guest may hold: they pass through the server's memory. */
const MAX_MOUNT_BYTES = 1 << 30;
/** The most a mount's copy into a guest may hold: one message to its agent (below the spawner's frame). */
const MAX_COPY_BYTES = 128 << 20;
/** Where a guest keeps each mount's record: the paths its copy held, and when (a stamp). */
const STATE = '/var/lib/shellbase/mounts';
/** Guest paths a machine's mount may not be at, beyond a query's: systemd's run-time file system, shellbase's records. */
const NOT_ON_DISK = ['/run', '/var/lib/shellbase'];

/** $1 path, $2 key, $3 1 for read-only; stdin: a tar of the context's tree. */
const ATTACH = `set -e
mkdir -p "$1" ${STATE}
tar -x -p --numeric-owner -C "$1" -f -
cd "$1" && find . -xdev -mindepth 1 -print0 | LC_ALL=C sort -z > ${STATE}/$2.list
touch ${STATE}/$2.stamp
if [ "$3" = 1 ]; then mount --bind "$1" "$1" && mount -o remount,ro,bind "$1"; fi
sync`;

/**
 * $1 path, $2 key. What changed below the path since its stamp (ctime newer) as a tar of paths
 * relative to it, and what of its recorded paths is gone: the list's length on a line, the
 * NUL-separated list, the tar. The next record (stamp first, so a write meanwhile is seen next
 * time) waits beside the current one until the changes are committed (ACCEPT).
 */
const COLLECT = `set -e
sync
touch ${STATE}/$2.next-stamp
cd "$1"
find . -xdev -mindepth 1 -cnewer ${STATE}/$2.stamp -print0 > /run/sb-mount-changed
find . -xdev -mindepth 1 -print0 | LC_ALL=C sort -z > ${STATE}/$2.next-list
LC_ALL=C comm -z -23 ${STATE}/$2.list ${STATE}/$2.next-list > /run/sb-mount-deleted
stat -c %s /run/sb-mount-deleted
cat /run/sb-mount-deleted
tar --null --no-recursion -T /run/sb-mount-changed --numeric-owner --ignore-failed-read -cpf - 2>/dev/null || test $? -eq 1
rm -f /run/sb-mount-changed /run/sb-mount-deleted`;

/** $1 key: the record COLLECT left becomes the mount's. */
const ACCEPT = `mv ${STATE}/$1.next-list ${STATE}/$1.list && mv ${STATE}/$1.next-stamp ${STATE}/$1.stamp`;

const keyOf = (p: string) => createHash('sha256').update(p).digest('hex').slice(0, 16);

/**
 * Contexts mounted into machines. A guest has its own kernel and disk, so a mount is a copy: at
 * create, the version's tree is copied into the guest at the path (read-only ones bind-mounted
 * read-only there) and its record kept in the guest; a commit of a writable mount sends what
 * changed below the path since its record (a tar and the deleted paths) and applies it to the
 * context over the version the copy holds (rebased past other writers, or a conflict that keeps
 * it), then keeps the new record. Forks and snapshots carry the copy in their disk and memory, and
 * the version it holds in their spec; each commits on its own.
 */
export class MachineMounts {
  constructor(private readonly deps: Deps, private readonly contexts: ContextAccess, private readonly staging: string) {}

  /** The mounts a create asks for, checked, each at the version its copy will hold (404s before anything is made). */
  async resolve(caller: Caller, own: string | undefined, asked: readonly Mount[] | undefined): Promise<MachineMount[]> {
    const checked = checkMounts(own ?? '', asked);
    for (const m of checked) {
      for (const r of NOT_ON_DISK) if (m.path === r || m.path.startsWith(`${r}/`) || r.startsWith(`${m.path}/`)) throw invalid(`mount path ${m.path} is in ${r}, which is the machine's own`, 'mount at a path of its disk, such as /mnt/data', { path: m.path });
    }
    return Promise.all(checked.map(async (m) => ({ context: m.context, path: m.path, readOnly: m.readOnly, version: (await this.contexts.mountBase(caller, m.context, m.version)).id })));
  }

  /** Copies each mount's version into the guest and records it there. */
  async attach(caller: Caller, vm: Vm, mounts: readonly MachineMount[]): Promise<void> {
    for (const m of mounts) {
      const tar = await this.tarOf((await this.contexts.mountBase(caller, m.context, m.version)).layers);
      const r = await vm.agent.run({ argv: ['bash', '-c', ATTACH, 'sh', m.path, keyOf(m.path), m.readOnly ? '1' : '0'], stdin: tar, timeoutMs: 600_000, outputBytes: 64 * 1024 });
      if (r.exitCode !== 0) {
        throw new ShellbaseError('failed_precondition', `copying ${m.context} into the machine at ${m.path} failed: ${r.stderr.toString().trim().slice(-500)}`, {
          hint: 'the guest needs room on its disk for the context\'s files (diskGb)',
        });
      }
    }
  }

  /**
   * Commits what changed below a writable mount's path into its context; the mounts with the
   * version its copy now holds. A conflict (the context changed the same paths meanwhile) keeps
   * the changes as an unattached version (409, details.version) and leaves the record as it was.
   */
  async commit(caller: Caller, vm: Vm, machine: string, mounts: readonly MachineMount[], at: string): Promise<MachineMount[]> {
    const i = mounts.findIndex((m) => m.path === at);
    if (i < 0) throw notFound('mount', at);
    const m = mounts[i];
    if (m.readOnly) throw invalid(`the mount at ${at} is read-only: it has nothing to commit`, 'mount it writable to commit what the machine writes there');
    const key = keyOf(m.path);
    const r = await vm.agent.run({ argv: ['bash', '-c', COLLECT, 'sh', m.path, key], timeoutMs: 600_000, outputBytes: MAX_MOUNT_BYTES });
    if (r.truncated) throw new ShellbaseError('payload_too_large', `machine ${machine} changed more than ${MAX_MOUNT_BYTES} bytes at ${at}`, { hint: 'commit more often' });
    if (r.exitCode !== 0) throw new ShellbaseError('failed_precondition', `collecting the changes at ${at} failed: ${r.stderr.toString().trim().slice(-500)}`);
    const out = r.stdout;
    const nl = out.indexOf(10);
    const n = Number(out.subarray(0, nl).toString());
    const deleted = out.subarray(nl + 1, nl + 1 + n).toString().split('\0').filter(Boolean);
    const tar = out.subarray(nl + 1 + n);
    const { version } = await this.contexts.apply(caller, m.context, m.version, deleted, Readable.from([tar]), `changes of machine ${machine} at ${at}`);
    const ok = await vm.agent.run({ argv: ['sh', '-c', ACCEPT, 'sh', key], timeoutMs: 60_000, outputBytes: 64 * 1024 });
    if (ok.exitCode !== 0) throw new ShellbaseError('internal', `keeping the record of ${at} failed: ${ok.stderr.toString().trim()}`);
    return mounts.map((x, j) => (j === i ? { ...x, version } : x));
  }

  /** The merged tree of `layers` as a tar, ids as a sandbox sees them (read by tar in the sandboxes' user namespace). */
  private async tarOf(layers: readonly string[]): Promise<Buffer> {
    const { host, snapshotter } = this.deps;
    if (!host) throw new ShellbaseError('failed_precondition', 'mounts into machines need the bwrap runtime', { hint: 'run the server with its bwrap runtime' });
    return helperOutput(snapshotter, host, {
      layers, staging: this.staging, name: `${newId('t')}.tar`, argv: (merged, made) => ['tar', '-C', merged, '--numeric-owner', '-cpf', made, '.'],
    }, async (made) => {
      const size = statSync(made).size;
      if (size > MAX_COPY_BYTES) {
        throw new ShellbaseError('payload_too_large', `the context's files are ${size} bytes, more than a machine's mount copies (${MAX_COPY_BYTES})`, {
          hint: 'mount a smaller context: one made empty (POST /v1/contexts with empty: true, or an E2B volume) holds only what is written to it',
        });
      }
      return readFileSync(made);
    });
  }
}

/** Guest paths a machine's commit of its own disk leaves out: its mounts'. */
export const mountPaths = (mounts: readonly MachineMount[] | undefined) => (mounts ?? []).map((m) => m.path);
