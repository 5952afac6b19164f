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
