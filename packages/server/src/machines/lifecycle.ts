import type { MachineState } from '@shellbase/protocol';
import { Lifecycle } from '../core/lifecycle.js';

/**
 * What happens to a machine. `powerOff`: it hibernates without its memory (its disk kept), and its
 * wake is a boot (`booted`). `lost`: its worker died (cluster mode) and its memory with it.
 */
export type MachineEvent = 'restored' | 'booted' | 'pause' | 'resume' | 'hibernate' | 'powerOff' | 'wake' | 'wakeFailed' | 'stop' | 'exited' | 'lost';

/**
 * A machine's lifecycle, the one place its moves are decided (MachineRun asks
 * it before each step): starting → running ⇄ paused; running or paused →
 * hibernated (with its memory, or powered off with only its disk) → (wake)
 * starting → running (restored, or booted from its disk); anything → stopped. In a cluster, a
 * machine whose worker died while it held memory (starting, running, paused)
 * is lost: only stop or delete remain (its snapshots restore as new machines).
 */
export const MACHINE_LIFECYCLE = new Lifecycle<MachineState, MachineEvent>('machine', {
  starting: { restored: 'running', booted: 'running', wakeFailed: 'hibernated', stop: 'stopped', exited: 'stopped', lost: 'lost' },
  running: { pause: 'paused', hibernate: 'hibernated', powerOff: 'hibernated', stop: 'stopped', exited: 'stopped', lost: 'lost' },
  paused: { resume: 'running', hibernate: 'hibernated', powerOff: 'hibernated', stop: 'stopped', exited: 'stopped', lost: 'lost' },
  hibernated: { wake: 'starting', stop: 'stopped' },
  stopped: {},
  lost: { stop: 'stopped' },
}, {
  paused: 'resume it first (POST .../resume)',
  stopped: 'create a new machine, or fork or restore one from a snapshot',
  hibernated: 'any call wakes it (exec, files, a request to an exposed port)',
  lost: 'the worker that ran it died with its memory: restore one of its snapshots, or delete it',
});
