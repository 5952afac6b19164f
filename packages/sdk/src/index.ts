export { Shellbase, type ShellbaseOptions } from './client.js';
export { ContextHandle, type ExecOptions } from './context.js';
export { MachineHandle, type MachineExecOptions } from './machine.js';
export * from './errors.js';
export type { LocalTunnel } from './tunnel.js';
export type { ApiKey, Context, DiffChange, DiffResult, DirEntry, ErrorCode, ExecEvent, ExecRequest, ExecResult, FileStat, Tenant, UsageItem, Version,
  Machine, MachineExecEvent, ContextNetwork, NetworkConnection, NetworkPolicy, Service, CreateServiceRequest, ServiceShare, MachineExecResult, MachineSnapshot, CreateMachineRequest } from '@shellbase/protocol';
