import { existsSync, mkdirSync, readFileSync, readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { runOk } from '../../util/proc.js';
import { buildKernelLayer } from './kernel-layer.js';
import { MachineLayout } from '../layout.js';

/**
 * What every machine boots from, built once per host into the cache
 * (`$SHELLBASE_CACHE/machines/assets/TAG/`): Debian's kernel as an
 * uncompressed `vmlinux` (QEMU enters it through PVH, skipping ~4 s of
 * decompression under TCG), an initramfs of busybox plus the modules the
 * root disk and the network need, and the kernel layer (`layer/`: every module
 * and the kernel's config, stacked on every machine's disk: machines/vm/kernel-layer.ts).
 * The kernel package is unpacked, never installed on the host.
 */
export interface MachineAssets {
  tag: string;
  dir: string;
  vmlinux: string;
  initrd: string;
  kernel: string;
  /** The kernel layer: `/usr/lib/modules/KERNEL` and `/boot/config-KERNEL`, ids shifted. */
  layer: string;
}

/**
 * Bump when the initramfs, the kernel layer or the way the kernel is extracted changes. Each
 * format has its own pointer (`current-FORMAT`), so servers of different formats share a cache.
 */
const ASSETS_FORMAT = 2;

/** Loaded in this order (dependencies first, from `modprobe --show-depends`). */
const MODULES = [
  'virtio_ring', 'virtio', 'virtio_mmio', 'virtio_blk', 'failover', 'net_failover', 'virtio_net',
  'virtio-rng', 'crc16', 'crc32c_generic', 'mbcache', 'jbd2', 'ext4',
];

/** The guest's address on QEMU's user-mode network (its defaults: 10.0.2.0/24, host at .2). */
export const GUEST_IP = '10.0.2.15';

/**
 * /init of the initramfs: load modules, bring up loopback and eth0 (the
 * configuration stays in the kernel across switch_root), mount the root disk
 * and hand over to systemd. `shellbase.probe` only proves the kernel ran
 * (the accelerator probe).
 */
const INIT = `#!/bin/busybox sh
B=/bin/busybox
$B mount -t proc proc /proc
if $B grep -q shellbase.probe /proc/cmdline; then echo SHELLBASE-PROBE-OK; $B poweroff -f; fi
$B mount -t devtmpfs dev /dev
for m in $($B cat /lib/modules/order); do $B insmod /lib/modules/$m.ko; done
$B ip link set lo up
$B ip link set eth0 up && $B ip addr add ${GUEST_IP}/24 dev eth0 && $B ip route add default via 10.0.2.2
$B mount -t ext4 -o rw /dev/vda /newroot || { echo "shellbase initramfs: cannot mount the root disk"; $B poweroff -f; }
$B umount /proc
$B mount --move /dev /newroot/dev
exec $B switch_root /newroot /sbin/init
`;

const assetsRoot = (cache: string) => new MachineLayout('', cache).assetsDir;

/** The built assets, or null before `buildAssets` ran on this host. */
export function findAssets(cache: string): MachineAssets | null {
  const root = assetsRoot(cache);
  let current = '';
  try { current = readFileSync(path.join(root, `current-${ASSETS_FORMAT}`), 'utf8').trim(); } catch { return null; }
  const dir = path.join(root, current);
  if (!current.startsWith(`${ASSETS_FORMAT}-`) || !existsSync(path.join(dir, 'info.json'))) return null;
  const info = JSON.parse(readFileSync(path.join(dir, 'info.json'), 'utf8')) as { kernel: string };
  return { tag: current, dir, vmlinux: path.join(dir, 'vmlinux'), initrd: path.join(dir, 'initrd.img'), kernel: info.kernel, layer: path.join(dir, 'layer') };
}

/** Builds the assets unless this format was built already; shows progress. */
export async function buildAssets(cache: string, progress: (line: string) => void): Promise<MachineAssets> {
  const found = findAssets(cache);
  if (found) return found;
  const root = assetsRoot(cache);
  mkdirSync(root, { recursive: true });
  const pkg = (await runOk('sh', ['-c', "apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-/{print $2; exit}'"])).toString().trim();
  if (!pkg) throw new Error('apt knows no linux-image-amd64: is the Debian mirror configured?');
  const kernel = pkg.replace(/^linux-image-/, '');
  const tag = `${ASSETS_FORMAT}-${kernel}`;
  const tmp = path.join(root, `${tag}.building`);
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(path.join(tmp, 'deb'), { recursive: true });
  progress(`downloading ${pkg} (unpacked into the cache, not installed)`);
  await runOk('sh', ['-c', `cd "$1" && apt-get download "$2"`, 'sh', path.join(tmp, 'deb'), pkg]);
  const deb = readdirSync(path.join(tmp, 'deb')).find((f) => f.endsWith('.deb'));
  if (!deb) throw new Error(`apt-get download ${pkg} left no package`);
  const unpacked = path.join(tmp, 'pkg');
  await runOk('dpkg-deb', ['-x', path.join(tmp, 'deb', deb), unpacked]);

  progress('extracting the uncompressed kernel (vmlinux)');
  const vmlinuz = readFileSync(path.join(unpacked, 'boot', `vmlinuz-${kernel}`));
  const xzAt = vmlinuz.indexOf(Buffer.from([0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00]));
  if (xzAt < 0) throw new Error(`vmlinuz-${kernel} holds no xz stream`);
  writeFileSync(path.join(tmp, 'vmlinux.xz'), vmlinuz.subarray(xzAt));
  // The kernel is followed by padding xz calls trailing garbage: its exit code says so, the ELF is whole.
  await runOk('sh', ['-c', 'xz -dc "$1/vmlinux.xz" > "$1/vmlinux" 2>/dev/null; head -c 4 "$1/vmlinux" | grep -q ELF', 'sh', tmp]);
  rmSync(path.join(tmp, 'vmlinux.xz'));

  progress(`building the initramfs (busybox, ${MODULES.length} modules)`);
  const initrd = path.join(tmp, 'initrd');
  for (const d of ['bin', 'lib/modules', 'proc', 'sys', 'dev', 'newroot']) mkdirSync(path.join(initrd, d), { recursive: true });
  await runOk('cp', ['/bin/busybox', path.join(initrd, 'bin', 'busybox')]);
  const modDir = path.join(unpacked, 'lib', 'modules', kernel);
  const byName = new Map<string, string>();
  const walk = (d: string) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      if (e.isDirectory()) walk(path.join(d, e.name));
      else if (e.name.endsWith('.ko')) byName.set(e.name.slice(0, -3), path.join(d, e.name));
    }
  };
  walk(modDir);
  for (const m of MODULES) {
    const file = byName.get(m);
    if (!file) throw new Error(`kernel ${kernel} has no module ${m}`);
    writeFileSync(path.join(initrd, 'lib', 'modules', `${m}.ko`), readFileSync(file));
  }
  writeFileSync(path.join(initrd, 'lib', 'modules', 'order'), `${MODULES.join('\n')}\n`);
  writeFileSync(path.join(initrd, 'init'), INIT, { mode: 0o755 });
  await runOk('sh', ['-c', 'cd "$1/initrd" && find . | cpio -o -H newc --quiet | gzip -1 > "$1/initrd.img"', 'sh', tmp]);
  rmSync(initrd, { recursive: true });
  await buildKernelLayer(unpacked, kernel, path.join(tmp, 'layer'), progress);
  rmSync(unpacked, { recursive: true });
  rmSync(path.join(tmp, 'deb'), { recursive: true });
  writeFileSync(path.join(tmp, 'info.json'), JSON.stringify({ format: ASSETS_FORMAT, kernel, package: pkg, builtAt: new Date().toISOString() }, null, 2));
  rmSync(path.join(root, tag), { recursive: true, force: true });
  renameSync(tmp, path.join(root, tag));
  writeFileSync(path.join(root, `current-${ASSETS_FORMAT}.tmp`), tag);
  renameSync(path.join(root, `current-${ASSETS_FORMAT}.tmp`), path.join(root, `current-${ASSETS_FORMAT}`));
  progress(`machine assets ready (${kernel})`);
  return findAssets(cache)!;
}
