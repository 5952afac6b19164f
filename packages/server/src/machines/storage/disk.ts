import { createHash } from 'node:crypto';
import { chownSync, existsSync, lchownSync, mkdirSync, readFileSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { Snapshotter } from '../../store/snapshotter/types.js';
import { SANDBOX_ROOT } from '../../util/idmap.js';
import type { HostPrograms } from '../../runtime/index.js';
import { SBX_SPAWNER, SBX_STORE } from '../../util/native.js';
import { runOk } from '../../util/proc.js';
import { GUEST_AGENT } from '../vm/agent.js';
import { AGENT_PORT, GUEST_PROXY, shellQuote } from '../vm/qemu.js';
import { proxyEnv } from '../../net/proxy-env.js';
import type { MachineLayout } from '../layout.js';

/**
 * The size of a template's disk as its guest sees it (sparse: only written blocks take space): the
 * smallest disk a machine has. A machine asks for more (`diskGb`) and its disk grows after the
 * restore (QMP `block_resize`, then `resize2fs` online in the guest: `MachineRun.growDisk`).
 */
export const DISK_GB = 8;

const AGENT_UNIT = `[Unit]
Description=shellbase guest agent
DefaultDependencies=no
After=local-fs.target

[Service]
ExecStart=${GUEST_AGENT} --listen ${AGENT_PORT}
Restart=always
RestartSec=100ms

[Install]
WantedBy=multi-user.target
`;

/** The egress proxy's variables (net/proxy-env.ts) at the guest's side of QEMU's network. */
const PROXY = proxyEnv(GUEST_PROXY);

/**
 * Where the guest's programs learn of the egress proxy: login shells (profile.d), every systemd
 * unit (the manager's default environment: a Docker daemon, a cron job), and apt even when it
 * is run without them. The agent passes the same variables to every command it runs.
 */
const PROXY_FILES: [string, string][] = [
  ['/etc/profile.d/shellbase-proxy.sh', `# shellbase: the one way out of a machine is its egress proxy.\n${Object.entries(PROXY).map(([k, v]) => `export ${k}=${shellQuote(v)}`).join('\n')}\n`],
  ['/etc/systemd/system.conf.d/shellbase-proxy.conf', `[Manager]\nDefaultEnvironment=${Object.entries(PROXY).map(([k, v]) => `"${k}=${v}"`).join(' ')}\n`],
  ['/etc/apt/apt.conf.d/80shellbase-proxy', `Acquire::http::Proxy "${PROXY.http_proxy}";\nAcquire::https::Proxy "${PROXY.https_proxy}";\n`],
];

/**
 * Units masked in every machine (linked to /dev/null): Debian's daily apt runs. A machine comes
 * from its template's memory with its clock moved on, so they would fire right away and hold the
 * dpkg lock that the user's first `apt-get install` needs (a CI run met "Could not get lock
 * /var/lib/dpkg/lock-frontend"); what a machine installs is its user's to choose.
 */
const MASKED_UNITS = ['apt-daily.timer', 'apt-daily-upgrade.timer'];

/**
 * What shellbase adds on top of a version to make it a machine's disk: the
 * guest agent (the static spawner), its systemd unit, a hostname, the
 * egress proxy's settings (PROXY_FILES) and the masked units (MASKED_UNITS). A layer
 * in overlay format with the sandboxes' shifted ids, stacked on top of the
 * version's layers. Cached per agent build: `$SHELLBASE_CACHE/machines/guest/HASH`.
 */
export function guestLayer(layout: MachineLayout): { dir: string; hash: string } {
  const agent = readFileSync(SBX_SPAWNER);
  const digest = createHash('sha256').update(agent).update(AGENT_UNIT);
  for (const [file, content] of PROXY_FILES) digest.update(file).update(content);
  for (const unit of MASKED_UNITS) digest.update(`masked ${unit}`);
  const hash = digest.digest('hex').slice(0, 12);
  const dir = layout.guestDir(hash);
  if (existsSync(dir)) return { dir, hash };
  const tmp = `${dir}.${process.pid}`;
  rmSync(tmp, { recursive: true, force: true });
  const files: [string, string | Buffer, number][] = [
    [GUEST_AGENT, agent, 0o755],
    ['/etc/systemd/system/shellbase-agent.service', AGENT_UNIT, 0o644],
    ['/etc/hostname', 'machine\n', 0o644],
    ...PROXY_FILES.map(([file, content]): [string, string, number] => [file, content, 0o644]),
  ];
  const own = (p: string) => chownSync(p, SANDBOX_ROOT, SANDBOX_ROOT);
  const mkdirs = (rel: string) => {
    let at = tmp;
    mkdirSync(at, { recursive: true });
    own(at);
    for (const part of rel.split('/').filter(Boolean)) {
      at = path.join(at, part);
      if (!existsSync(at)) { mkdirSync(at, { mode: 0o755 }); own(at); }
    }
  };
  for (const [p, content, mode] of files) {
    mkdirs(path.dirname(p));
    writeFileSync(path.join(tmp, p), content, { mode });
    own(path.join(tmp, p));
  }
  mkdirs('/etc/systemd/system/multi-user.target.wants');
  const link = path.join(tmp, 'etc/systemd/system/multi-user.target.wants/shellbase-agent.service');
  symlinkSync('/etc/systemd/system/shellbase-agent.service', link);
  lchownSync(link, SANDBOX_ROOT, SANDBOX_ROOT);
  for (const unit of MASKED_UNITS) {
    const masked = path.join(tmp, 'etc/systemd/system', unit);
    symlinkSync('/dev/null', masked);
    lchownSync(masked, SANDBOX_ROOT, SANDBOX_ROOT);
  }
  mkdirSync(path.dirname(dir), { recursive: true });
  try { renameSync(tmp, dir); } catch { rmSync(tmp, { recursive: true, force: true }); } // another server won the race
  return { dir, hash };
}

/**
 * Makes `out`, a sparse raw ext4 image, from `layers` (bottom first) with
 * `above` on top (top first: the guest layer, then the kernel layer of
 * machines/vm/kernel-layer.ts). `mkfs.ext4 -d` reads the merged tree inside the
 * sandboxes' user namespace, so the disk holds ids as the guest sees them
 * (root is 0 again); nothing of the tree is mounted on the host outside a
 * private mount namespace that ends with the command.
 */
export async function buildDisk(layers: Snapshotter, runtime: HostPrograms, versionLayers: readonly string[], above: readonly string[], out: string, staging: string): Promise<void> {
  await helperOutput(layers, runtime, {
    layers: versionLayers, above, staging, name: `${path.basename(path.dirname(out))}.raw`,
    argv: (merged, made) => ['mkfs.ext4', '-q', '-F', '-L', 'root', '-E', 'lazy_itable_init=1,lazy_journal_init=1', '-d', merged, made, `${DISK_GB}G`],
  }, async (made) => {
    chownSync(made, 0, 0);
    try { renameSync(made, out); } catch { await copySparse(made, out); } // another file system (the cache)
  });
}

/**
 * Runs a helper tool (`argv`, given the merged tree and the file it writes) over `layers` (bottom
 * first) with `above` on top, as the sandboxes' root: it reads ids as a sandbox sees them and
 * writes one file, made for it below `staging` (a directory it can reach). `use` gets that file
 * before it is removed, with the scratch the mount needed.
 */
export async function helperOutput<T>(layers: Snapshotter, runtime: HostPrograms,
  o: { layers: readonly string[]; above?: readonly string[]; staging: string; name: string; argv(merged: string, made: string): string[] },
  use: (made: string) => Promise<T>): Promise<T> {
  const scratch = await layers.prepare({ diskMb: 64 });
  mkdirSync(o.staging, { recursive: true, mode: 0o711 });
  const made = path.join(o.staging, o.name);
  try {
    writeFileSync(made, '', { mode: 0o600 });
    chownSync(made, SANDBOX_ROOT, SANDBOX_ROOT);
    await runtime.runHelper({ mount: await layers.mounts(o.layers, scratch), extraLowers: o.above ?? [], argv: (merged) => o.argv(merged, made) });
    return await use(made);
  } finally {
    rmSync(made, { force: true });
    await layers.discard(scratch);
  }
}

/** A new qcow2 overlay at `file` over `backing` (the top of a frozen chain). */
export async function overlay(backing: string, file: string, cwd?: string): Promise<void> {
  const format = backing.endsWith('.raw') ? 'raw' : 'qcow2';
  const args = ['create', '-q', '-f', 'qcow2', '-b', backing, '-F', format, file];
  // A relative backing path is resolved from the overlay's directory, and must exist there when checked.
  await runOk('sh', ['-c', 'cd "$1" && shift && exec qemu-img "$@"', 'sh', cwd ?? path.dirname(file), ...args]);
}

/** Copies a RAM file keeping its holes (pages the guest never touched take no space) and leaving its zero pages out, in two threads. */
export async function copySparse(from: string, to: string): Promise<void> {
  await runOk(SBX_STORE, ['copy', from, to]);
}

