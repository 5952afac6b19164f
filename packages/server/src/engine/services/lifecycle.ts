import type { ServiceState } from '@shellbase/protocol';
import { Lifecycle } from '../../core/lifecycle.js';

/** What happens to a service's process. */
export type ServiceEvent = 'wake' | 'ready' | 'startFailed' | 'stop' | 'exited';

/**
 * A service's lifecycle, the one place its moves are decided (ServiceRun asks
 * it): sleeping → (a request) starting → (its port accepts) running →
 * (idle, asked, or shut down) stopping → (its writes committed) sleeping.
 * A process that exits on its own goes back to sleeping from any waking state.
 */
export const SERVICE_LIFECYCLE = new Lifecycle<ServiceState, ServiceEvent>('service', {
  sleeping: { wake: 'starting' },
  starting: { ready: 'running', startFailed: 'sleeping', stop: 'stopping', exited: 'sleeping' },
  running: { stop: 'stopping', exited: 'sleeping' },
  stopping: { exited: 'sleeping' },
});
