import type { VersionCause } from '@shellbase/protocol';
import { ShellbaseError } from '../../errors.js';
import type { Caller } from '../../core/deps.js';
import type { ContextAccess } from '../../core/contexts.js';
import type { MachineRow } from '../../store/metadata/types.js';
import { GuestError, type Vm } from '../vm/types.js';

/** The most a commit carries (its tar travels through the server's memory). */
const MAX_COMMIT_BYTES = 1 << 30;

/** In a query of the context: the deletions, then the tar, as the guest's root wrote them. */
const APPLY = `set -e
read n
head -c "$n" > /tmp/.deleted
xargs -0 -r rm -rf -- < /tmp/.deleted
tar -x -p --numeric-owner -f - -C /`;

type Exec = ContextAccess['exec'];

/**
 * A machine's disk as a new version of `context`: only the changed paths travel (the guest's
 * `changes`; its mounts' paths are theirs, not the disk's), and they commit as a query's writes do (over the context's head, rebased past
 * other writers, or a conflict that loses nothing). `timeoutMs`: how long applying the changes
 * in a query of the context may take.
 */
export async function commitMachine(caller: Caller, run: { row: MachineRow; vm: Vm | null }, context: string, exec: Exec, timeoutMs: number): Promise<string> {
  let r: { data: Buffer; truncated: boolean };
  try {
    r = await run.vm!.guest.changes(MAX_COMMIT_BYTES, (run.row.spec.mounts ?? []).map((m) => m.path));
  } catch (e) {
    if (!(e instanceof GuestError)) throw e;
    throw new ShellbaseError('failed_precondition', `collecting the changes of machine ${run.row.id} failed: ${e.message}`, { hint: 'create the machine again to commit it' });
  }
  if (r.truncated) throw new ShellbaseError('payload_too_large', `machine ${run.row.id} changed more than ${MAX_COMMIT_BYTES} bytes`, { hint: 'commit less at once: copy what matters into a context with the files API' });
  const skip = (run.row.spec.mounts ?? []).map((m) => m.path);
  if (skip.length) r = { ...r, data: withoutDeletedBelow(r.data, skip) };
  const cause: VersionCause = { kind: 'machine', command: `commit of machine ${run.row.id}` };
  const applied = await exec(caller, context, { argv: ['sh', '-c', APPLY], timeoutMs, commit: 'on-success' }, { stdin: r.data, cause });
  if (applied.exitCode !== 0) {
    throw new ShellbaseError('failed_precondition', `applying the changes of machine ${run.row.id} to ${context} failed: ${applied.stderr.trim().slice(-500)}`, {
      hint: 'the context is unchanged; check that it has room (diskMb) for the machine\'s changes',
    });
  }
  if (applied.conflict) {
    throw new ShellbaseError('conflict', `the machine's changes overlap changes committed to ${context} meanwhile`, {
      details: { paths: applied.conflict.paths, version: applied.conflict.version },
      hint: 'the changes are kept as version details.version: merge or reset to it',
    });
  }
  return applied.version;
}

/**
 * The guest's changes without deletions at or below `paths` (its mounts': the record of its base
 * has them, the collection prunes them, so they would read as deleted). The input and output are
 * the apply step's: the list's length on a line, the NUL-separated list, the tar.
 */
export function withoutDeletedBelow(data: Buffer, paths: readonly string[]): Buffer {
  const nl = data.indexOf(10);
  const n = Number(data.subarray(0, nl).toString());
  const list = data.subarray(nl + 1, nl + 1 + n);
  // Names stay bytes (a guest's file names need not be UTF-8); mount paths are plain ASCII.
  const below = paths.map((m) => [Buffer.from(m), Buffer.from(`${m}/`)] as const);
  const kept: Buffer[] = [];
  for (let at = 0; at < list.length;) {
    const end = list.indexOf(0, at);
    const name = list.subarray(at, end < 0 ? list.length : end);
    at = end < 0 ? list.length : end + 1;
    if (name.length && !below.some(([m, dir]) => name.equals(m) || name.subarray(0, dir.length).equals(dir))) kept.push(name, Buffer.alloc(1));
  }
  const out = Buffer.concat(kept);
  return Buffer.concat([Buffer.from(`${out.length}\n`), out, data.subarray(nl + 1 + n)]);
}
