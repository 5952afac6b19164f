import { existsSync, mkdirSync, readFileSync, statfsSync, writeFileSync, closeSync, openSync, ftruncateSync } from 'node:fs';
import path from 'node:path';
import { run, runOk } from '../../../util/proc.js';

const BTRFS_MAGIC = 0x9123683e;

/** The file system type of the mount point `dir` (as /proc/self/mountinfo says), or null if not a mount point. */
export function mountedFsType(dir: string): string | null {
  return mountOf(dir)?.type ?? null;
}

/** The mount at `dir`: its file system type and source (for a loop mount, the loop device). */
function mountOf(dir: string): { type: string; source: string } | null {
  const info = readFileSync('/proc/self/mountinfo', 'utf8');
  for (const line of info.split('\n')) {
    const f = line.split(' ');
    const dash = f.indexOf('-');
    if (dash > 0 && f[4] === dir) return { type: f[dash + 1], source: f[dash + 2] };
  }
  return null;
}

export function isBtrfs(dir: string): boolean {
  return statfsSync(dir).type === BTRFS_MAGIC;
}

/**
 * Makes `mountPoint` a btrfs file system with quotas enabled. When the data
 * directory already is on btrfs it is used in place; otherwise a sparse file
 * beside it is formatted once and loop-mounted (again after every reboot), its
 * loop device doing direct I/O to the file (directIo).
 */
export async function openVolume(mountPoint: string, imageFile: string, sizeGb: number): Promise<{ mounted: boolean }> {
  mkdirSync(mountPoint, { recursive: true });
  if (mountedFsType(mountPoint) === 'btrfs') {
    if (existsSync(imageFile)) await directIo(mountPoint);
    return { mounted: false };
  }
  if (isBtrfs(mountPoint)) {
    await enableQuota(mountPoint);
    return { mounted: false };
  }
  if (!existsSync(imageFile)) {
    const tmp = `${imageFile}.new`;
    const fd = openSync(tmp, 'w');
    ftruncateSync(fd, sizeGb * 1024 ** 3);
    closeSync(fd);
    await runOk('mkfs.btrfs', ['-q', '-K', '-f', tmp]);
    await runOk('mv', [tmp, imageFile]);
  }
  await runOk('mount', ['-o', 'loop,noatime', imageFile, mountPoint]);
  await directIo(mountPoint);
  await enableQuota(mountPoint);
  return { mounted: true };
}

/**
 * Switches the loop device under `mountPoint` to direct I/O: the store's writes go to the image
 * file's blocks without passing through a second page cache (the file's), which halves what a
 * large write copies and flushes (a restore, a big commit's sync). A host file system that
 * cannot do direct I/O leaves the device as it was: slower, not wrong.
 */
async function directIo(mountPoint: string): Promise<void> {
  const dev = mountOf(mountPoint)?.source;
  if (dev?.startsWith('/dev/loop')) await run('losetup', ['--direct-io=on', dev]);
}

async function enableQuota(mountPoint: string): Promise<void> {
  const marker = path.join(mountPoint, '.quota-enabled');
  if (existsSync(marker)) return;
  await runOk('btrfs', ['quota', 'enable', mountPoint]);
  writeFileSync(marker, '1\n');
}

/** Unmounts the volume if it is the loop-mounted file of `openVolume` (never a host's own btrfs). */
export async function closeVolume(mountPoint: string, imageFile: string): Promise<void> {
  if (!existsSync(imageFile) || mountedFsType(mountPoint) !== 'btrfs') return;
  // A helper that has just exited may still hold the file system for a moment.
  for (let attempt = 0; attempt < 20; attempt++) {
    const r = await run('umount', [mountPoint]);
    if (r.code === 0 || mountedFsType(mountPoint) !== 'btrfs') return;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  // Still busy after 2 s: detach it now; the kernel finishes when the last user lets go.
  await runOk('umount', ['--lazy', mountPoint]);
}
