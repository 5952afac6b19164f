// What other layers use of machines: the service, the agent, machines' rows, and the client of a machine's code interpreter.
export { Machines } from './machines.js';
export { Agent, GUEST_AGENT } from './vm/agent.js';
export type { MachineRow } from '../store/metadata/types.js';
export { CODE_PORT, runCode } from './code.js';
export { captureScreen, inputCommand, sendInput } from './screen.js';
