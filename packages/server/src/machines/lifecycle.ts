import type { MachineState } from '@shellbase/protocol';
import { Lifecycle } from '../core/lifecycle.js';

/** What happens to a machine. */
export type MachineEvent = 'restored' | 'pause' | 'resume' | 'hibernate' | 'wake' | 'wakeFailed' | 'stop' | 'exited';

/**
 * A machine's lifecycle, the one place its moves are decided (MachineRun asks
 * it before each step): starting → running ⇄ paused; running or paused →
 * hibernated → (wake) starting → running; anything → stopped.
 */
export const MACHINE_LIFECYCLE = new Lifecycle<MachineState, MachineEvent>('machine', {
  starting: { restored: 'running', wakeFailed: 'hibernated', stop: 'stopped', exited: 'stopped' },
  running: { pause: 'paused', hibernate: 'hibernated', stop: 'stopped', exited: 'stopped' },
  paused: { resume: 'running', hibernate: 'hibernated', stop: 'stopped', exited: 'stopped' },
  hibernated: { wake: 'starting', stop: 'stopped' },
  stopped: {},
}, {
  paused: 'resume it first (POST .../resume)',
  stopped: 'create a new machine, or fork or restore one from a snapshot',
  hibernated: 'any call wakes it (exec, files, a request to an exposed port)',
});
