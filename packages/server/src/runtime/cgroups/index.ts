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
