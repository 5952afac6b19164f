import type { MachinesConfig, ServerConfig } from '../config.js';
import { ShellbaseError } from '../errors.js';
import { overQuota, quotasOf } from '../core/quotas.js';
import type { Caller } from '../core/deps.js';
import type { MachineRun } from './run.js';

/** Machines that hold memory and count against the caps: running, paused, or starting. */
const live = (runs: readonly MachineRun[]) => runs.filter((r) => r.state === 'running' || r.state === 'paused' || r.state === 'starting');

/** Refuses `count` more machines over the tenant's `runningMachines` (the host's room is `hostRoom`'s). */
export function tenantRoom(config: ServerConfig, runs: readonly MachineRun[], caller: Pick<Caller, 'tenantId' | 'quotas'>, count: number): void {
  const { runningMachines } = quotasOf(config, caller);
  const mine = live(runs).filter((r) => r.row.tenantId === caller.tenantId).length;
  if (mine + count > runningMachines) throw overQuota('runningMachines', runningMachines, 'stop, hibernate or delete machines you do not need (idle ones hibernate by themselves)');
}

/** What the host holds besides machines: ready VMs (machines/pool/ready.ts), counted as machines are. */
export interface Held { count: number; memoryMb: number }

/**
 * Refuses a start that would pass the host's cap on machines or its memory budget, `held` counted
 * as running (a wake checks only this).
 */
export function hostRoom(m: MachinesConfig, runs: readonly MachineRun[], memoryMb: number, count: number, held: Held = { count: 0, memoryMb: 0 }): void {
  const running = live(runs);
  if (running.length + held.count + count > m.maxRunning) {
    throw new ShellbaseError('limit_exceeded', `this host runs at most ${m.maxRunning} machines at once`, { details: { limit: m.maxRunning }, hint: 'try again when machines hibernate, or stop some' });
  }
  const used = running.reduce((s, r) => s + r.row.spec.memoryMb, held.memoryMb);
  if (used + memoryMb * count > m.memoryBudgetMb) {
    throw new ShellbaseError('limit_exceeded', `the host's machine memory budget (${m.memoryBudgetMb} MiB) has ${m.memoryBudgetMb - used} MiB left; ${memoryMb * count} MiB asked`, {
      details: { budgetMb: m.memoryBudgetMb, usedMb: used }, hint: 'ask for less memory or fewer copies, or stop machines first',
    });
  }
}
