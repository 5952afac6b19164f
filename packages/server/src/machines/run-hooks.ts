import type { MachineRow, StoredMachineFiles } from '../store/metadata/types.js';
import type { EgressSession, Traffic } from '../net/egress.js';
import type { MachineHost } from './host.js';

/** What a machine's run asks of the service that owns it (machines/runs.ts gives them). */
export interface RunHooks {
  host: MachineHost;
  /** Persists the row (state and spec). */
  save(row: MachineRow): Promise<void>;
  /** A segment of running time ended: meter it (of its wall time, `activeMs` had a user; bytes through the egress proxy). */
  meter(row: MachineRow, wallMs: number, cpuMs: number, extra: { activeMs: number } & Traffic): Promise<void>;
  /**
   * The egress session of one VM (the machine's policy as it stands now): `ahead`, a ready VM's
   * session opened before it had an owner, given its spec; else a new one. Null where the VM
   * backend's guests have no network.
   */
  egress(row: MachineRow, ahead?: EgressSession): Promise<EgressSession | null>;
  /** Whether another machine may run now (throws 429 otherwise; ready VMs may end to make room). */
  admit(row: MachineRow): Promise<void>;
  /** Before a machine idle for its `idleTimeoutMs` hibernates (its mounts' changes are committed: machines/mounts.ts). */
  beforeIdle(row: MachineRow): Promise<void>;
  /** A lifecycle step took `ms` (metrics). */
  step(step: 'restore' | 'adopt' | 'freeze' | 'hibernate', ms: number): void;
  /**
   * Whether a running machine whose memory file holds `usedMiB` is frozen by a live copy
   * (machines/vm/live-copy.ts `copiesLive`), its VM offering one that is `sound` or not.
   */
  liveCopy(usedMiB: number, sound: boolean): Promise<boolean>;
  /** A stopped copy of `usedMiB` paused the machine `ms` (what the next choice goes by). */
  stoppedCopy(ms: number, usedMiB: number): void;
  /** A live copy failed (logged); a stopped copy is made instead. */
  liveCopyFailed(row: MachineRow, err: unknown): void;
  /** A freeze copied the machine this way (what the tests and the bench check). */
  copied(how: 'live' | 'stopped'): void;
  /**
   * Cluster mode (machines/placement.ts): a hibernation's files to the object store (an error
   * leaves them only here), and before a wake, the files here (the row with its disk chain as it is here).
   */
  stow?(row: MachineRow, saved: { ram: string; state: string }): Promise<StoredMachineFiles>;
  unstow?(row: MachineRow, saved: { ram: string; state: string }): Promise<MachineRow>;
  /** The stow's failure (logged: the machine stays hibernated on this worker only). */
  stowFailed?(row: MachineRow, err: unknown): void;
}
