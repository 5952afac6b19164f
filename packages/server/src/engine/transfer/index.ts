import type { Readable } from 'node:stream';
import type { BackupResult, Context } from '@shellbase/protocol';
import type { Caller, Deps } from '../../core/deps.js';
import { ShellbaseError, invalid } from '../../errors.js';
import { openBlobStore, parseBlobStoreUrl } from '../../store/blobs/index.js';
import type { GarbageCollector } from '../gc.js';
import type { MachineBackups } from '../../core/backups.js';
import { takeBackup, type BackupOptions, type BackupProgress } from './backup.js';
import { exportContext, type ContextArchive, type ExportOptions, type VersionOf } from './export.js';
import { importContext, type ImageVersionOf, type ImportOptions } from './import.js';
import { exportOciLayout, pushOci, type OciExportOptions, type OciPushOptions, type OciPushResult } from './oci.js';

/**
 * Contexts taken out and brought in: shellbase's own archive (format.ts; export.ts, import.ts)
 * and OCI images (oci.ts: a layout, or a push to a registry); the whole server backed up
 * (backup.ts; restore.ts restores one into an empty home, with no server running).
 */
export class Transfer {
  /** The backup running now: a server takes one at a time. */
  private backingUp: string | null = null;

  constructor(private readonly deps: Deps, private readonly gc: GarbageCollector, private readonly machines: MachineBackups | null, private readonly versionOf: VersionOf, private readonly imageVersion: ImageVersionOf) {}

  /** The whole server, as of one moment, into a target (a directory or an S3 prefix); admin only. */
  async backup(caller: Caller, opts: BackupOptions & { to: string; s3Endpoint?: string }, progress?: (p: BackupProgress) => void): Promise<BackupResult> {
    if (!caller.admin) throw new ShellbaseError('forbidden', 'only the admin key backs the server up', { hint: 'a tenant takes its contexts out with `shellbase export`' });
    if (this.backingUp) {
      throw new ShellbaseError('conflict', `a backup (to ${this.backingUp}) is running on this server`, { hint: 'wait for it to finish: a server takes one backup at a time' });
    }
    if (parseBlobStoreUrl(opts.to).kind === 'memory') throw invalid('a backup goes to a directory or an S3 prefix', 'name an absolute directory, file:///DIR or s3://BUCKET/PREFIX');
    const target = openBlobStore(opts.to, opts.s3Endpoint ? { endpoint: opts.s3Endpoint } : {});
    this.backingUp = opts.to;
    try {
      return await takeBackup(this.deps, this.gc, this.machines, target, { ...(opts.keep !== undefined ? { keep: opts.keep } : {}) }, progress);
    } finally {
      this.backingUp = null;
      (target as { close?: () => void }).close?.();
    }
  }

  /** The context's head (or a version, or its whole history) as an archive, to be written. */
  export(caller: Caller, name: string, opts: ExportOptions): Promise<ContextArchive> {
    return exportContext(this.deps, this.versionOf, caller, name, opts);
  }

  /** A context made from an archive, with the archive's version ids. */
  import(caller: Caller, body: Readable, opts: ImportOptions): Promise<Context> {
    return importContext(this.deps, this.imageVersion, caller, body, opts);
  }

  /** The context's head (or a version) as an OCI image layout, a tar. */
  exportOci(caller: Caller, name: string, opts: OciExportOptions): Promise<Readable> {
    return exportOciLayout(this.deps, this.versionOf, caller, name, opts);
  }

  /** The context's head (or a version) pushed to a registry as an OCI image. */
  push(caller: Caller, name: string, opts: OciPushOptions): Promise<OciPushResult> {
    return pushOci(this.deps, this.versionOf, caller, name, opts);
  }
}
