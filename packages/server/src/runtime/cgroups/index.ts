import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { CgroupV1Driver } from './v1.js';
import { CgroupV2Driver } from './v2.js';
import type { CgroupDriver } from './types.js';

export type { Cgroup, CgroupDriver, CgroupLimits, CgroupStats } from './types.js';

/** Picks the driver for this host: pure v2 when /sys/fs/cgroup is the unified hierarchy, else v1. */
export function cgroupDriver(instance: string): CgroupDriver {
  if (existsSync('/sys/fs/cgroup/cgroup.controllers')) return new CgroupV2Driver(instance);
  return new CgroupV1Driver(instance);
}

/** A server's cgroup instance: named after its data directory, so servers over different homes never touch each other's. */
export function cgroupInstance(home: string): string {
  return createHash('sha256').update(home).digest('hex').slice(0, 12);
}

/**
 * Kills and removes the cgroups a server over `home` left (one killed for good: a server started
 * again on the home recovers them itself), its instance's own directories included.
 */
export async function removeCgroupsOf(home: string): Promise<void> {
  await cgroupDriver(cgroupInstance(home)).close();
}
