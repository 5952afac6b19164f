import { Type } from 'typebox';
import { NameSchema, VersionIdSchema, strict } from './common.js';

/** Contexts as archives: `GET /v1/contexts/{name}/export` and `POST /v1/contexts/import` (docs/formats.md). */

export const ExportQuerySchema = Type.Object({
  /** That version instead of the head. */
  version: Type.Optional(VersionIdSchema),
  /** Every version reachable from the head. */
  history: Type.Optional(Type.Boolean()),
}, strict);

export const ContextImportQuerySchema = Type.Object({
  /** The new context's name (default: the archive's). */
  as: Type.Optional(NameSchema),
}, strict);

/** `GET /v1/contexts/{name}/export/oci`: the context as an OCI image layout, a tar (docs/formats.md). */
export const OciExportQuerySchema = Type.Object({
  /** That version instead of the head. */
  version: Type.Optional(VersionIdSchema),
  /** The tag the layout's index names the image by (default `latest`). */
  tag: Type.Optional(Type.String({ minLength: 1, maxLength: 128 })),
}, strict);

export const RegistryCredentialsSchema = Type.Object({
  username: Type.String({ maxLength: 1024 }), password: Type.String({ maxLength: 8192 }),
}, { ...strict, title: 'RegistryCredentials' });

/** `POST /v1/contexts/{name}/push`: the context as an OCI image, pushed to a registry. */
export const PushBodySchema = Type.Object({
  /** `registry/repository:tag`. */
  ref: Type.String({ minLength: 1, maxLength: 512 }),
  /** That version instead of the head. */
  version: Type.Optional(VersionIdSchema),
  /** For a registry that wants them (basic authentication, or a token service's). */
  credentials: Type.Optional(RegistryCredentialsSchema),
  /** Plain HTTP to a registry that is not on loopback. */
  insecure: Type.Optional(Type.Boolean()),
}, strict);

export const PushResultSchema = Type.Object({
  /** Where the image is: `registry/repository:tag`. */
  ref: Type.String(),
  /** The image manifest's digest. */
  digest: Type.String(),
  /** How many layers it has. */
  layers: Type.Integer(),
}, { $id: 'PushResult', title: 'PushResult' });

/** `POST /v1/backups` (admin key): the whole server backed up into a target (docs/formats.md, Server backup). */
export const BackupBodySchema = Type.Object({
  /** Where: an absolute directory on the server's host, `file:///DIR`, or `s3://BUCKET/PREFIX`. */
  to: Type.String({ minLength: 1, maxLength: 4096 }),
  /** The S3 API's URL for an `s3://` target that is not AWS (credentials: the server's AWS environment). */
  s3Endpoint: Type.Optional(Type.String({ minLength: 1, maxLength: 2048 })),
  /** Keep this many complete backups in the target: older ones, and the blobs only they name, go. */
  keep: Type.Optional(Type.Integer({ minimum: 1, maximum: 10_000 })),
}, strict);

export const BackupResultSchema = Type.Object({
  /** The backup's id (its start time, then a tag): `shellbase restore --id`. */
  id: Type.String(),
  /** The moment the backup holds: every commit acknowledged before it is in the backup. */
  pointAt: Type.String(),
  /** Layers the backup names. */
  layers: Type.Integer(),
  /** Of those, the ones the target lacked and that were copied now. */
  copied: Type.Integer(),
  /** Bytes this backup stored in the target. */
  bytes: Type.Integer(),
  /** Hibernated and stopped machines, and snapshots, whose files are in the backup. */
  machines: Type.Integer(),
  snapshots: Type.Integer(),
  /** Machines and snapshots whose files are not (running ones; one deleted or woken during the backup), and why: a restore removes them. */
  left: Type.Optional(Type.Array(Type.Object({ id: Type.String(), why: Type.String() }))),
  /** What retention (`keep`) removed. */
  removed: Type.Optional(Type.Object({ backups: Type.Array(Type.String()), blobs: Type.Integer() })),
}, { $id: 'BackupResult', title: 'BackupResult' });
