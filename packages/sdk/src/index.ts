// The SDK for Node: the browser-safe core (./core, also published as `@shellbase/sdk/core`)
// with Node's own classes and helpers in place of the core's Shellbase, ContextHandle and MachineHandle.
export { Shellbase, type ShellbaseOptions } from './client.js';
export { ContextHandle, type ExecOptions } from './context.js';
export { MachineHandle, type MachineExecOptions, type RunCodeOptions } from './machine.js';
export { contextOf, type BuildOptions } from './images.js';
export type { ImageProgress, TarBody } from './core/images.js';
export type { BackupProgress } from './core/client.js';
export { tar, tarDirectory, type TarInput } from './tar.js';
export * from './core/errors.js';
export { limitMessage } from './core/limits.js';
export type { EventsFilter, EventStream } from './core/events.js';
export { TIMEOUT_CEILING_MS, formatDuration, parseDuration } from '@shellbase/protocol';
export type { LocalTunnel } from './tunnel.js';
export type { MachinePty, PtyExit } from './pty.js';
export type { ApiKey, Delivery, EventKind, ShellbaseEvent, Webhook, WebhookCreated, WebhookIn, LimitHit, Context, DiffChange, DiffResult, DirEntry, ErrorCode, ExecEvent, ExecRequest, ExecResult, Mount, MountResult, FileStat, Tenant, UsageItem, Version,
  Machine, MachineInput, Cursor, MouseButton, MachineExecEvent, ContextNetwork, NetworkConnection, NetworkPolicy, Service, CreateServiceRequest, ServiceShare, MachineExecResult, MachineSnapshot, MachineConsole, CreateMachineRequest,
  BuildEvent, BuildResult, BuildStep, ContextConfig, ContextDefaults, Image, ImageConfig, ImageEvent, PushResult, RegistryCredentials, BackupResult } from '@shellbase/protocol';
