/**
 * Wire types of HTTP API v1 shared by the server, the SDK and the CLI, each derived from its
 * TypeBox schema in ./schemas, where each type's description and its fields' docs are; with the
 * members of the state and kind unions (constants.ts). The imports of schemas are types only:
 * this module, like the package's main entry point, loads no TypeBox at run time.
 */
import type { Static } from 'typebox';
import type {
  ApiKeySchema, BuildEventSchema, CodeErrorSchema, CodeEventSchema, CodeExecutionSchema, CodeResultSchema, RunCodeRequestSchema, MachineInputSchema, CursorSchema, MouseButtonSchema, BuildResultSchema, BuildStepSchema, CommitModeSchema, ConnectionKindSchema, ContextConfigSchema,
  ContextDefaultsSchema, ContextNetworkSchema, ContextSchema, CreateMachineRequestSchema, CreateServiceRequestSchema, DiffChangeSchema,
  DiffResultSchema, DirEntrySchema, ErrorBodySchema, ExecEventSchema, ExecExitSchema, ExecLimitsSchema, ExecRequestSchema, ExecResultSchema, ExecUsageSchema, MountSchema, MountResultSchema,
  FileStatSchema, FileTypeSchema, GcResultSchema, ImageConfigSchema, ImageEventSchema, ImageSchema, LimitHitSchema, MachineConsoleSchema,
  MachineExecEventSchema, MachineExecRequestSchema, MachineExecResultSchema, MachinePortSchema, MachineSchema, MachineSnapshotSchema,
  MachineStateSchema, NetworkConnectionSchema, NetworkPolicySchema, PtyMessageSchema, ResizeMachineDiskRequestSchema, ServiceAccessSchema,
  ServiceSchema, ServiceShareSchema, ServiceStateSchema, TenantSchema, UsageItemSchema, VersionCauseKindSchema, VersionCauseSchema,
  VersionSchema, EventKindSchema, PushResultSchema, BackupResultSchema, RegistryCredentialsSchema, EventSchema, WebhookInSchema, WebhookSchema, WebhookCreatedSchema, DeliverySchema, DeliveryStateSchema,
} from './schemas/index.js';

export {
  CODE_MAX_CHARS, DIFF_KINDS, EVENT_KINDS, FILE_TYPES, MACHINE_CONSOLE_MAX_BYTES, MACHINE_CONSOLE_MAX_LINES, MACHINE_STATES, PTY_KEY_PREFIX, PTY_PROTOCOL, SERVICE_ACCESS,
  SERVICE_STATES, TIMEOUT_CEILING_MS, VERSION_CAUSE_KINDS, MAX_MOUNTS,
} from './constants.js';

/** The wire form of an error: the body is `{error: ErrorBody}`. */
export type ErrorBody = Static<typeof ErrorBodySchema>;

export type Context = Static<typeof ContextSchema>;
export type ContextDefaults = Static<typeof ContextDefaultsSchema>;
export type ContextConfig = Static<typeof ContextConfigSchema>;
export type ImageConfig = Static<typeof ImageConfigSchema>;
export type Image = Static<typeof ImageSchema>;
export type ImageEvent = Static<typeof ImageEventSchema>;
export type BuildStep = Static<typeof BuildStepSchema>;
export type BuildResult = Static<typeof BuildResultSchema>;
export type BuildEvent = Static<typeof BuildEventSchema>;

export type VersionCauseKind = Static<typeof VersionCauseKindSchema>;
export type VersionCause = Static<typeof VersionCauseSchema>;
export type Version = Static<typeof VersionSchema>;

export type ExecLimits = Static<typeof ExecLimitsSchema>;
export type CommitMode = Static<typeof CommitModeSchema>;
export type LimitHit = Static<typeof LimitHitSchema>;
export type ExecRequest = Static<typeof ExecRequestSchema>;
export type ExecUsage = Static<typeof ExecUsageSchema>;
export type ExecResult = Static<typeof ExecResultSchema>;
export type Mount = Static<typeof MountSchema>;
export type MountResult = Static<typeof MountResultSchema>;
export type ExecExit = Static<typeof ExecExitSchema>;
export type ExecEvent = Static<typeof ExecEventSchema>;

export type FileType = Static<typeof FileTypeSchema>;
export type FileStat = Static<typeof FileStatSchema>;
export type DirEntry = Static<typeof DirEntrySchema>;
export type DiffChange = Static<typeof DiffChangeSchema>;
export type DiffResult = Static<typeof DiffResultSchema>;

export type Tenant = Static<typeof TenantSchema>;
export type ApiKey = Static<typeof ApiKeySchema>;
export type UsageItem = Static<typeof UsageItemSchema>;
export type GcResult = Static<typeof GcResultSchema>;
export type PushResult = Static<typeof PushResultSchema>;
export type BackupResult = Static<typeof BackupResultSchema>;
export type RegistryCredentials = Static<typeof RegistryCredentialsSchema>;

export type ServiceState = Static<typeof ServiceStateSchema>;
export type Service = Static<typeof ServiceSchema>;
export type ServiceShare = Static<typeof ServiceShareSchema>;
export type ServiceAccess = Static<typeof ServiceAccessSchema>;
export type CreateServiceRequest = Static<typeof CreateServiceRequestSchema>;

export type MachineState = Static<typeof MachineStateSchema>;
export type Machine = Static<typeof MachineSchema>;
export type MachinePort = Static<typeof MachinePortSchema>;
export type CreateMachineRequest = Static<typeof CreateMachineRequestSchema>;
export type ResizeMachineDiskRequest = Static<typeof ResizeMachineDiskRequestSchema>;
export type MachineExecRequest = Static<typeof MachineExecRequestSchema>;
export type MachineExecResult = Static<typeof MachineExecResultSchema>;
export type MachineExecEvent = Static<typeof MachineExecEventSchema>;
export type RunCodeRequest = Static<typeof RunCodeRequestSchema>;
export type CodeResult = Static<typeof CodeResultSchema>;
export type CodeError = Static<typeof CodeErrorSchema>;
export type CodeExecution = Static<typeof CodeExecutionSchema>;
export type CodeEvent = Static<typeof CodeEventSchema>;
export type MachineInput = Static<typeof MachineInputSchema>;
export type MouseButton = Static<typeof MouseButtonSchema>;
export type Cursor = Static<typeof CursorSchema>;
export type MachineConsole = Static<typeof MachineConsoleSchema>;
export type PtyMessage = Static<typeof PtyMessageSchema>;
export type MachineSnapshot = Static<typeof MachineSnapshotSchema>;

export type NetworkPolicy = Static<typeof NetworkPolicySchema>;
export type ContextNetwork = Static<typeof ContextNetworkSchema>;
export type ConnectionKind = Static<typeof ConnectionKindSchema>;
export type NetworkConnection = Static<typeof NetworkConnectionSchema>;

export type EventKind = Static<typeof EventKindSchema>;
export type ShellbaseEvent = Static<typeof EventSchema>;
export type WebhookIn = Static<typeof WebhookInSchema>;
export type Webhook = Static<typeof WebhookSchema>;
export type WebhookCreated = Static<typeof WebhookCreatedSchema>;
export type Delivery = Static<typeof DeliverySchema>;
export type DeliveryState = Static<typeof DeliveryStateSchema>;
