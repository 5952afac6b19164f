import type { VersionCause } from '@shellbase/protocol';
import { ShellbaseError } from '../../errors.js';
import type { Caller } from '../../core/deps.js';
import type { ContextAccess } from '../../core/contexts.js';
import type { MachineRow } from '../../store/metadata/types.js';
import type { Agent } from '../vm/agent.js';

/** Paths a machine's commit leaves out: kernel file systems, run-time state, scratch, shellbase's own. */
const SKIPPED = ['/proc', '/sys', '/dev', '/run', '/tmp', '/var/lib/shellbase', '/lost+found'];
export const PRUNED = SKIPPED.map((p) => `-path ${p}`).join(' -o ');

/** The most a commit carries (its tar travels through the server's memory). */
const MAX_COMMIT_BYTES = 1 << 30;

/**
 * In the guest: what changed since the template's stamp (ctime newer: new,
 * modified, chmod-ed or renamed), as a tar, and what of the template's paths
 * is gone, as a NUL-separated list. Output: the list's length on one line,
 * the list, the tar.
 */
const COLLECT = `set -e
sync
find / -xdev -mindepth 1 \\( ${PRUNED} \\) -prune -o -cnewer /var/lib/shellbase/stamp -print0 > /run/shellbase-changed
find / -xdev -mindepth 1 \\( ${PRUNED} \\) -prune -o -print0 | LC_ALL=C sort -z > /run/shellbase-now
LC_ALL=C comm -z -23 /var/lib/shellbase/base.list /run/shellbase-now > /run/shellbase-deleted
stat -c %s /run/shellbase-deleted
cat /run/shellbase-deleted
# 1: a file changed while it was read (a log being written): its bytes at that moment are kept.
tar --null --no-recursion -T /run/shellbase-changed --numeric-owner --ignore-failed-read -cpf - 2>/dev/null || test $? -eq 1
rm -f /run/shellbase-changed /run/shellbase-now /run/shellbase-deleted`;

/** In a query of the context: the deletions, then the tar, as the guest's root wrote them. */
const APPLY = `set -e
read n
head -c "$n" > /tmp/.deleted
xargs -0 -r rm -rf -- < /tmp/.deleted
tar -x -p --numeric-owner -f - -C /`;

type Exec = ContextAccess['exec'];

/**
 * A machine's disk as a new version of `context`: only the changed paths
 * travel, and they commit as a query's writes do (over the context's head,
 * rebased past other writers, or a conflict that loses nothing).
 */
/** `timeoutMs`: how long applying the changes in a query of the context may take. */
export async function commitMachine(caller: Caller, run: { row: MachineRow; agent: Agent | null }, context: string, exec: Exec, timeoutMs: number): Promise<string> {
  const r = await run.agent!.run({ argv: ['bash', '-c', COLLECT], timeoutMs: 600_000, outputBytes: MAX_COMMIT_BYTES });
  if (r.truncated) throw new ShellbaseError('payload_too_large', `machine ${run.row.id} changed more than ${MAX_COMMIT_BYTES} bytes`, { hint: 'commit less at once: copy what matters into a context with the files API' });
  if (r.exitCode !== 0) {
    const reason = /base\.list|stamp/.test(r.stderr.toString()) ? 'its disk has no record of its base (made before commits were possible)' : r.stderr.toString().trim();
    throw new ShellbaseError('failed_precondition', `collecting the changes of machine ${run.row.id} failed: ${reason}`, { hint: 'create the machine again to commit it' });
  }
  const cause: VersionCause = { kind: 'machine', command: `commit of machine ${run.row.id}` };
  const applied = await exec(caller, context, { argv: ['sh', '-c', APPLY], timeoutMs, commit: 'on-success' }, { stdin: r.stdout, cause });
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
