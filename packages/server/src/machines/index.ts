// What other layers (compat/) use of machines: the service, the agent, and machines' rows.
export { Machines } from './machines.js';
export { Agent, GUEST_AGENT } from './vm/agent.js';
export type { MachineRow } from '../store/metadata/types.js';
