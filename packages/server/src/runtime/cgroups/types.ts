/**
 * A cgroup per sandbox: limits what it may use and tells what it used.
 * Drivers exist for cgroup v1 (one hierarchy per controller) and v2 (unified).
 */
export interface CgroupLimits {
  memoryMb: number;
  pids: number;
  cpus: number;
}

export interface CgroupStats {
  cpuMs: number;
  memoryPeakBytes: number;
  oomKilled: boolean;
}

export interface Cgroup {
  /** Files a process writes "0" to in order to join (one per hierarchy). */
  readonly joinFiles: string[];
  stats(): CgroupStats;
  /** Its share of contended CPU against sibling cgroups (1 = an ordinary sandbox's). */
  setWeight(weight: number): void;
  /** Caps its CPU time at `cpus` cores (below its limits' cpus while its group must share). */
  setCpuCap(cpus: number): void;
  /** Sends a signal to every process in the cgroup, once. */
  signal(sig: NodeJS.Signals): void;
  /** SIGKILLs every process in the cgroup until it is empty. */
  kill(): Promise<void>;
  /** Kills what is left; the cgroup is then reused or removed. */
  release(): Promise<void>;
}

export interface CgroupDriver {
  readonly version: 1 | 2;
  /** A cgroup with these limits, for one sandbox (fresh or reused, never shared). */
  acquire(limits: CgroupLimits): Cgroup;
  /** Kills and removes every cgroup this instance left behind (after a crash). */
  recover(): Promise<number>;
  /** Removes this instance's (empty) parent cgroups when the server stops. */
  close(): Promise<void>;
}
