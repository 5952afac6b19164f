import type { Agent } from './agent.js';
import { GuestError, type GuestOps, type GuestRead } from './types.js';

/** Paths a machine's commit leaves out: kernel file systems, run-time state, scratch, shellbase's own. */
const SKIPPED = ['/proc', '/sys', '/dev', '/run', '/tmp', '/var/lib/shellbase', '/lost+found'];
const PRUNED = SKIPPED.map((p) => `-path ${p}`).join(' -o ');

/**
 * Run in a template's guest before it is frozen: the paths of the booted disk (sorted,
 * NUL-separated) and a time stamp, which `changes` compares with.
 */
const RECORD_BASE = `set -e
mkdir -p /var/lib/shellbase
find / -xdev -mindepth 1 \\( ${PRUNED} \\) -prune -o -print0 | LC_ALL=C sort -z > /var/lib/shellbase/base.list
touch /var/lib/shellbase/stamp
sync`;

/**
 * What changed since the template's stamp (ctime newer: new, modified, chmod-ed or renamed), as
 * a tar, and what of the template's paths is gone, as a NUL-separated list. Output: the list's
 * length on one line, the list, the tar.
 */
const collect = (pruned: string) => `set -e
sync
find / -xdev -mindepth 1 \\( ${pruned} \\) -prune -o -cnewer /var/lib/shellbase/stamp -print0 > /run/shellbase-changed
find / -xdev -mindepth 1 \\( ${pruned} \\) -prune -o -print0 | LC_ALL=C sort -z > /run/shellbase-now
LC_ALL=C comm -z -23 /var/lib/shellbase/base.list /run/shellbase-now > /run/shellbase-deleted
stat -c %s /run/shellbase-deleted
cat /run/shellbase-deleted
# 1: a file changed while it was read (a log being written): its bytes at that moment are kept.
tar --null --no-recursion -T /run/shellbase-changed --numeric-owner --ignore-failed-read -cpf - 2>/dev/null || test $? -eq 1
rm -f /run/shellbase-changed /run/shellbase-now /run/shellbase-deleted`;

/**
 * After the disk grew to $1 sectors: waits until the kernel sees them (the virtio driver learns of
 * it from a configuration interrupt), then grows the root file system.
 */
const GROW_ROOT = `for i in $(seq 200); do [ "$(cat /sys/block/vda/size)" -ge "$1" ] && break; sleep 0.05; done
[ "$(cat /sys/block/vda/size)" -ge "$1" ] || { echo "the guest still sees $(cat /sys/block/vda/size) sectors of $1" >&2; exit 1; }
resize2fs /dev/vda`;

const READ = 'if [ -d "$1" ]; then echo D; cd "$1" && ls -1Ap; elif [ -e "$1" ]; then echo F; exec cat -- "$1"; else echo "no such file: $1" >&2; exit 2; fi';
const WRITE = 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1" && chmod "$2" -- "$1"';

/** A Debian guest's own system, through shell commands its agent runs. */
export class ShellGuest implements GuestOps {
  constructor(private readonly agent: Agent) {}

  async read(path: string, maxBytes: number): Promise<GuestRead> {
    const r = await this.agent.run({ argv: ['sh', '-c', READ, 'sh', path], timeoutMs: 60_000, outputBytes: maxBytes + 2 });
    if (r.exitCode === 2) return { kind: 'missing' };
    if (r.exitCode !== 0) throw new GuestError(r.stderr.toString().trim());
    const kind = r.stdout.subarray(0, 2).toString();
    if (kind === 'D\n') return { kind: 'dir', entries: r.stdout.subarray(2).toString().split('\n').filter(Boolean) };
    return { kind: 'file', data: r.stdout.subarray(2), truncated: r.truncated };
  }

  async write(path: string, data: Buffer, mode: number): Promise<void> {
    const r = await this.agent.run({ argv: ['sh', '-c', WRITE, 'sh', path, mode.toString(8)], stdin: data, timeoutMs: 60_000, outputBytes: 64 * 1024 });
    if (r.exitCode !== 0) throw new GuestError(r.stderr.toString().trim());
  }

  async growRoot(sectors: number): Promise<void> {
    const r = await this.agent.run({ argv: ['sh', '-c', GROW_ROOT, 'sh', String(sectors)], timeoutMs: 120_000, outputBytes: 16 * 1024 });
    if (r.exitCode !== 0) throw new GuestError((r.stderr.toString() || r.stdout.toString()).trim().slice(-500));
  }

  async recordBase(): Promise<void> {
    const r = await this.agent.run({ argv: ['bash', '-c', RECORD_BASE], timeoutMs: 300_000, outputBytes: 64 * 1024 });
    if (r.exitCode !== 0) throw new GuestError(`recording the disk's paths failed: ${r.stderr.toString().trim()}`);
  }

  async changes(maxBytes: number, skip: readonly string[] = []): Promise<{ data: Buffer; truncated: boolean }> {
    // Skipped paths are find's arguments ($1…), never spliced into the script.
    const pruned = [PRUNED, ...skip.map((_, i) => `-path "$${i + 1}"`)].join(' -o ');
    const r = await this.agent.run({ argv: ['bash', '-c', collect(pruned), 'sh', ...skip], timeoutMs: 600_000, outputBytes: maxBytes });
    if (r.truncated) return { data: r.stdout, truncated: true };
    if (r.exitCode !== 0) {
      throw new GuestError(/base\.list|stamp/.test(r.stderr.toString()) ? 'its disk has no record of its base (made before commits were possible)' : r.stderr.toString().trim());
    }
    return { data: r.stdout, truncated: false };
  }
}
