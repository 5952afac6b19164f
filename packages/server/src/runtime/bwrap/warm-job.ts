import type { MountSpec } from '../../store/snapshotter/types.js';
import { SANDBOX_CAPS, checkBinds, sandboxEnv, type BwrapArgsOptions } from './args.js';

/**
 * A warm sandbox's job (native/warm.c): the same overlay (and volumes' `--overlay`s, or `--view`s
 * of read-only ones: views.ts), cgroups, binds, environment, working
 * directory and capabilities that `sbx run` and bwrapArgs() give a sandbox started cold, and
 * the hand-over ports (`--hand PORT>SOCKET`) its pid 1 serves, as NUL-terminated strings.
 */
export function warmJob(o: { mount: MountSpec; volumes?: string[]; joinFiles: string[]; hands?: string[] } & Omit<BwrapArgsOptions, 'merged'>): Buffer {
  const a: string[] = [];
  for (const f of o.joinFiles) a.push('--cgroup', f);
  a.push('--chdir', o.mount.chdir, '--lower', o.mount.lower, '--upper', o.mount.upper, '--work', o.mount.work, '--merged', o.mount.merged, ...(o.volumes ?? []));
  for (const b of checkBinds(o.binds)) a.push(b.readOnly ? '--ro-bind' : '--bind', b.source, b.target);
  for (const [k, v] of Object.entries(sandboxEnv(o.env))) a.push('--setenv', k, v);
  for (const h of o.hands ?? []) a.push('--hand', h);
  a.push('--cwd', o.cwd);
  for (const cap of SANDBOX_CAPS) a.push('--cap-add', cap);
  a.push('--', ...o.argv);
  for (const s of a) if (s.includes('\0')) throw new Error('a sandbox argument holds a NUL byte');
  return Buffer.from(a.map((s) => `${s}\0`).join(''));
}
