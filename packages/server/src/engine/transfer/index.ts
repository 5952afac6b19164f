import type { Readable } from 'node:stream';
import type { Context } from '@shellbase/protocol';
import type { Caller, Deps } from '../../core/deps.js';
import { exportContext, type ExportOptions, type VersionOf } from './export.js';
import { importContext, type ImageVersionOf, type ImportOptions } from './import.js';
import { exportOciLayout, pushOci, type OciExportOptions, type OciPushOptions, type OciPushResult } from './oci.js';

/**
 * Contexts taken out and brought in: shellbase's own archive (format.ts; export.ts, import.ts)
 * and OCI images (oci.ts: a layout, or a push to a registry).
 */
export class Transfer {
  constructor(private readonly deps: Deps, private readonly versionOf: VersionOf, private readonly imageVersion: ImageVersionOf) {}

  /** The context's head (or a version, or its whole history) as an archive. */
  export(caller: Caller, name: string, opts: ExportOptions): Promise<Readable> {
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
