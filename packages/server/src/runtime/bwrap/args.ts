/**
 * The bubblewrap command line of a sandbox.
 *
 * Namespaces: pid, mount, ipc, uts, net (loopback only) and cgroup, inside the
 * user namespace `sbx run --userns` made (bwrap runs as its root, so it makes
 * no user namespace of its own).
 * File system: the overlay as `/`, a fresh /proc, bwrap's minimal /dev (null,
 * zero, full, random, urandom, tty, pts, shm) and /tmp as a tmpfs that is not
 * part of the context. bwrap always sets no_new_privs, then installs the
 * seccomp filter of native/seccomp.c (fd SECCOMP_FD) just before the exec.
 * Capabilities: the sandbox's root keeps only SANDBOX_CAPS, a subset of
 * Docker's default set without MKNOD, NET_RAW and AUDIT_WRITE (so no device
 * nodes, raw sockets or audit records), and holds them only in its own user
 * namespace: over host objects it has none.
 */
export const SANDBOX_CAPS = [
  'CAP_CHOWN', 'CAP_DAC_OVERRIDE', 'CAP_FOWNER', 'CAP_FSETID', 'CAP_KILL', 'CAP_SETGID',
  'CAP_SETUID', 'CAP_SETPCAP', 'CAP_SETFCAP', 'CAP_NET_BIND_SERVICE', 'CAP_SYS_CHROOT',
] as const;

/** The file descriptor `sbx run --seccomp-fd` leaves the filter on, for `bwrap --seccomp` (native/seccomp.c). */
export const SECCOMP_FD = 9;

export const DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

export interface BwrapArgsOptions {
  merged: string;
  binds?: { source: string; target: string; readOnly?: boolean }[];
  argv: string[];
  env: Record<string, string>;
  cwd: string;
}

export function bwrapArgs(o: BwrapArgsOptions): string[] {
  const args = [
    '--die-with-parent', '--new-session',
    '--unshare-pid', '--unshare-ipc', '--unshare-uts', '--unshare-net', '--unshare-cgroup',
    '--bind', o.merged, '/',
    '--proc', '/proc', '--dev', '/dev', '--tmpfs', '/tmp',
    // Below /tmp: a mount point made in the overlay would become a change of the context. The one
    // exception is a read-only /etc/hosts (services' links), which every image has, so bwrap finds
    // its mount point there and makes none.
    ...(o.binds ?? []).flatMap((b) => {
      if (!b.target.startsWith('/tmp/') && !(b.target === '/etc/hosts' && b.readOnly)) throw new Error(`bind target ${b.target} is not below /tmp`);
      return [b.readOnly ? '--ro-bind' : '--bind', b.source, b.target];
    }),
    '--hostname', 'sandbox',
    '--clearenv',
  ];
  const env: Record<string, string> = { PATH: DEFAULT_PATH, HOME: '/root', LANG: 'C.UTF-8', ...o.env };
  for (const [k, v] of Object.entries(env)) args.push('--setenv', k, v);
  args.push('--chdir', o.cwd, '--seccomp', String(SECCOMP_FD), '--cap-drop', 'ALL');
  for (const cap of SANDBOX_CAPS) args.push('--cap-add', cap);
  args.push('--', ...o.argv);
  return args;
}
