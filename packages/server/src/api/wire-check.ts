/**
 * The wire types of packages/protocol (what the SDK and the CLI compile
 * against) checked against the TypeBox schemas the API validates and
 * documents with: each pair must be the same type, so a field added to one and
 * missing from the other fails to compile. Nothing here runs.
 */
import type * as P from '@shellbase/protocol';
import type { Static, TSchema } from 'typebox';
import type { GcResult } from './routes/gc.js';
import type { DiffResult } from './routes/history.js';
import type { ConsoleTail, CreateBody as CreateMachineBody, DiskBody, ExecResult as MachineExecResult, Machine, Snapshot } from './routes/machines.js';
import type { Stat } from './routes/files.js';
import type { ApiKeySchema, TenantSchema } from './routes/tenants.js';
import type { CreateServiceBody, Service } from './routes/services.js';
import type { Item } from './routes/usage.js';
import type { Connection, ContextNetwork } from './routes/network.js';
import type { BuildResultSchema, ImageSchema } from './routes/images.js';
import type { Context, ExecResult, Version } from './schemas.js';

/** Every field, at every depth, made required: two types with the same fields have mutually assignable Keys. */
type Keys<T> = T extends readonly (infer U)[] ? Keys<U>[] : T extends object ? { [K in keyof T]-?: Keys<NonNullable<T[K]>> } : 'leaf';
/** True when X and Y accept the same values and name the same fields (optional ones included), at every depth. */
type Same<X, Y> = [X] extends [Y] ? [Y] extends [X] ? [Keys<X>] extends [Keys<Y>] ? [Keys<Y>] extends [Keys<X>] ? true : false : false : false : false;
type Wire<S extends TSchema> = Static<S>;
type Flat<T> = T;
const same = <X, Y>(ok: Same<X, Y>) => ok;

export const checks = [
  same<Wire<typeof Context>, Flat<P.Context>>(true),
  same<Wire<typeof Version>, Flat<P.Version>>(true),
  same<Wire<typeof ExecResult>, Flat<P.ExecResult>>(true),
  same<Wire<typeof DiffResult>, Flat<P.DiffResult>>(true),
  same<Wire<typeof Stat>, Flat<P.FileStat>>(true),
  same<Wire<typeof TenantSchema>, Flat<P.Tenant>>(true),
  same<Wire<typeof ApiKeySchema>, Flat<P.ApiKey>>(true),
  same<Wire<typeof Item>, Flat<P.UsageItem>>(true),
  same<Wire<typeof GcResult>, Flat<P.GcResult>>(true),
  same<Wire<typeof Service>, Flat<P.Service>>(true),
  same<Wire<typeof CreateServiceBody>, Flat<P.CreateServiceRequest>>(true),
  same<Wire<typeof Machine>, Flat<P.Machine>>(true),
  same<Wire<typeof Snapshot>, Flat<P.MachineSnapshot>>(true),
  same<Wire<typeof ConsoleTail>, Flat<P.MachineConsole>>(true),
  same<Wire<typeof MachineExecResult>, Flat<P.MachineExecResult>>(true),
  same<Wire<typeof ContextNetwork>, Flat<P.ContextNetwork>>(true),
  same<Wire<typeof Connection>, Flat<P.NetworkConnection>>(true),
  same<Wire<typeof CreateMachineBody>, Flat<P.CreateMachineRequest>>(true),
  same<Wire<typeof DiskBody>, Flat<P.ResizeMachineDiskRequest>>(true),
  same<Wire<typeof ImageSchema>, Flat<P.Image>>(true),
  same<Wire<typeof BuildResultSchema>, Flat<P.BuildResult>>(true),
];
