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
