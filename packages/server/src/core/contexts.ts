import type { Readable } from 'node:stream';
import type { ExecRequest, ExecResult, VersionCause } from '@shellbase/protocol';
import type { VersionRow } from '../store/metadata/types.js';
import type { Caller } from './deps.js';

/** What a caller of a query may pass besides its request. */
export interface ExecHooks {
  onOutput?: (stream: 'stdout' | 'stderr', data: string) => void;
  signal?: AbortSignal;
  /** Subsystems' own queries (a machine's commit): binary stdin instead of `req.stdin`, and the version's cause. */
  stdin?: Buffer;
  cause?: VersionCause;
}

/**
 * What other subsystems (machines) use of contexts. The engine implements it;
 * the server hands it to them, so they never import the engine.
 */
export interface ContextAccess {
  /** The version a machine starts from (pinned by the caller's hold): `version`, else the context's head. */
  base(caller: Caller, context: string, version?: string): Promise<VersionRow>;
  /** A caller acting for a tenant (work a machine does on its own: its mounts' commit before an idle hibernation). */
  callerFor(tenantId: string): Promise<Caller>;
  /** The version a mounted context shows (`version`, else its head; pinned by the caller's hold): `not_found` when there is no such context. */
  mountBase(caller: Caller, context: string, version?: string): Promise<VersionRow>;
  /** The root version of an image: a built-in one, or one the caller pulled (pinned by the caller's hold). */
  imageVersion(caller: Caller, image: string): Promise<VersionRow>;
  /** What a version lacks to boot as a machine (systemd as /sbin/init), or null when it has it. */
  unbootable(version: VersionRow): Promise<string | null>;
  /** The image a context was made from (null: no such context). */
  imageOf(caller: Caller, context: string): Promise<string | null>;
  /** A query of a context (a machine's commit applies its changes through one). */
  exec(caller: Caller, context: string, req: ExecRequest, hooks?: ExecHooks): Promise<ExecResult>;
  /**
   * Changes made elsewhere over `base` as one version of a context (engine/files: `apply`):
   * deleted paths and a tar of what is new or changed, rebased or a conflict as a query's writes.
   */
  apply(caller: Caller, context: string, base: string, deleted: readonly string[], body: Readable, description: string): Promise<{ version: string }>;
}
