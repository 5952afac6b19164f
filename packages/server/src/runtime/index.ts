export type { Runtime, SandboxLimits, SandboxResult, SandboxSpec } from './types.js';
export { BwrapRuntime } from './bwrap/bwrap-runtime.js';
export { cgroupDriver } from './cgroups/index.js';
export { SANDBOX_CAPS } from './bwrap/args.js';
