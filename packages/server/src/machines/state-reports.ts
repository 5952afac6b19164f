import type { EventSink } from '../events/index.js';
import type { MachineRow } from '../store/metadata/types.js';

/**
 * `machine.state` events: one when a machine this worker runs changes state, from the state it
 * was last in here (`seen`: where a run starts, from its row), `deleted` when it goes.
 */
export class StateReports {
  private readonly last = new Map<string, string>();

  constructor(private readonly events: EventSink) {}

  /** The state a machine is in as this worker takes it up (its next change is reported from it). */
  seen(row: MachineRow): void { this.last.set(row.id, row.state); }

  /** This worker no longer runs it (taken over elsewhere). */
  forget(id: string): void { this.last.delete(id); }

  /** Reports `state` (the row's, or `deleted`) if it is not the one last reported. */
  report(row: MachineRow, state: string = row.state): void {
    const from = this.last.get(row.id) ?? null;
    if (from === state) return;
    if (state === 'deleted') this.last.delete(row.id); else this.last.set(row.id, state);
    this.events.emit({ tenantId: row.tenantId, kind: 'machine.state', machine: row.id, ...(row.spec.context ? { context: row.spec.context } : {}), data: { state, from } });
  }
}
