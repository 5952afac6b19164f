// The browser-safe core of the SDK (`@shellbase/sdk/core`): nothing here imports a `node:` module
// or uses Node's globals (test/unit/sdk-core.test.ts checks), so it runs in a browser, a worker or
// Node. The web console (packages/console) is built on it; `@shellbase/sdk` extends it for Node.
export { Shellbase, type BackupProgress, type ClientOptions } from './client.js';
export { ContextHandle, type ExecOptions } from './context.js';
export { MachineHandle, type MachineExecOptions, type RunCodeOptions } from './machine.js';
export type { BuildOptions, ImageProgress, TarBody } from './images.js';
export { tar, tarBlob, type TarBlobInput, type TarInput } from './tar.js';
export * from './errors.js';
export { limitMessage } from './limits.js';
export { ndjson } from './ndjson.js';
export type { EventsFilter, EventStream } from './events.js';
export type { RequestOptions, Transport } from './transport.js';
export { TIMEOUT_CEILING_MS, formatDuration, parseDuration } from '@shellbase/protocol';
export type { ApiKey, Delivery, EventKind, ShellbaseEvent, Webhook, WebhookCreated, WebhookIn, LimitHit, Context, DiffChange, DiffResult, DirEntry, ErrorCode, ExecEvent, ExecRequest, ExecResult, FileStat, Tenant, UsageItem, Version,
  Machine, MachineExecEvent, ContextNetwork, NetworkConnection, NetworkPolicy, Service, CreateServiceRequest, ServiceShare, MachineExecResult, MachineSnapshot, MachineConsole, CreateMachineRequest,
  BuildEvent, BuildResult, BuildStep, ContextConfig, ContextDefaults, Image, ImageConfig, ImageEvent, PushResult, RegistryCredentials } from '@shellbase/protocol';
