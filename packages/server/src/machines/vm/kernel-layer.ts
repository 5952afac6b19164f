import { chmodSync, copyFileSync, existsSync, mkdirSync, readFileSync, renameSync } from 'node:fs';
import path from 'node:path';
import { SANDBOX_ROOT } from '../../util/idmap.js';
import { SBX_STORE } from '../../util/native.js';
import { runOk } from '../../util/proc.js';

/**
 * The kernel layer: what of the guest kernel's own package a machine's disk needs, stacked on
 * every machine's disk below the guest layer (machines/storage/disk.ts), so any image or context gets it
 * without changing the image. It holds, from the same `linux-image-*` package as the `vmlinux`:
 * - `/usr/lib/modules/KERNEL/`: every module, zstd-compressed (391 MB → ~105 MB for 6.1; the
 *   image's kmod reads `.ko.zst`), with the indexes `depmod` makes (`modules.dep`,
 *   `modules.alias` for udev's autoloading, `modules.devname` for the static nodes such as
 *   /dev/fuse that load their module when first opened);
 * - `/boot/config-KERNEL`: the kernel's configuration (docker's check-config, bpftrace, bcc).
 *
 * The kernel's BTF needs no file: Debian's kernel has CONFIG_DEBUG_INFO_BTF and shows it at
 * /sys/kernel/btf/vmlinux. Files are stored with the sandboxes' shifted ids, like every layer.
 * Built with the assets (machines/vm/assets.ts), so the assets' tag names it in templates' keys.
 */
export async function buildKernelLayer(unpacked: string, kernel: string, into: string, progress: (line: string) => void): Promise<void> {
  const modules = path.join(unpacked, 'lib', 'modules', kernel);
  if (!existsSync(modules)) throw new Error(`the kernel package has no lib/modules/${kernel}`);
  progress('compressing the kernel\'s modules (zstd) for the kernel layer');
  // -12: within ~15% of xz's size in a seventh of its time; decompressing is cheap in the guest.
  await runOk('sh', ['-c', 'find "$1" -name "*.ko" -print0 | xargs -0 -r -n 200 -P "$(nproc)" zstd -q --rm -12', 'sh', modules]);
  // depmod of kmod 30 reads BASE/lib/modules/KERNEL; the guest's /lib is a link to /usr/lib.
  await runOk('depmod', ['-b', unpacked, kernel]);
  const dep = readFileSync(path.join(modules, 'modules.dep'), 'utf8');
  if (!/(^|\/)fuse\.ko\.zst:/m.test(dep)) {
    throw new Error('depmod did not index the compressed modules: the host\'s kmod needs zstd support (Debian 12\'s has it)');
  }
  const lib = path.join(into, 'usr', 'lib', 'modules');
  const boot = path.join(into, 'boot');
  for (const d of [into, path.join(into, 'usr'), path.join(into, 'usr', 'lib'), lib, boot]) {
    mkdirSync(d, { recursive: true });
    chmodSync(d, 0o755);
  }
  renameSync(modules, path.join(lib, kernel));
  copyFileSync(path.join(unpacked, 'boot', `config-${kernel}`), path.join(boot, `config-${kernel}`));
  chmodSync(path.join(boot, `config-${kernel}`), 0o644);
  await runOk(SBX_STORE, ['shift', into, String(SANDBOX_ROOT)]);
}
