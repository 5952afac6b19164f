export type { ArchiveUnpacking, Bridge, BridgeSpec, HelperSpec, HostPrograms, JailSpec, Runtime, RunningSandbox, SandboxLimits, SandboxResult, SandboxRuntime, SandboxSpec } from './types.js';
export { BwrapRuntime, innerPid } from './bwrap/bwrap-runtime.js';
export type { Cgroup } from './cgroups/types.js';
export { cgroupDriver, cgroupInstance, removeCgroupsOf } from './cgroups/index.js';
export { DEFAULT_PATH, SANDBOX_CAPS } from './bwrap/args.js';
export { MemoryRuntime } from './memory/memory-runtime.js';
