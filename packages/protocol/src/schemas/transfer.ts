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
