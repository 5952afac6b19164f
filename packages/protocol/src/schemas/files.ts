import { Type } from 'typebox';
import { FILE_TYPES } from '../constants.js';
import { oneOf, strict } from './common.js';

/** A context's files without a sandbox: read, write, delete, stat, list. */

export const FileTypeSchema = oneOf(FILE_TYPES, { title: 'FileType' });

export const FileStatSchema = Type.Object({
  type: FileTypeSchema, size: Type.Integer(), mode: Type.Integer(),
  /** Owner and group as a sandbox sees them (65534 for ids a sandbox cannot map). */
  uid: Type.Integer(),
  gid: Type.Integer(),
  mtime: Type.String(),
  /** A symlink's target, as stored. */
  target: Type.Optional(Type.String()),
}, { title: 'FileStat' });

/** One entry of a directory listing (`GET .../files/DIR`: `{entries: DirEntry[]}`). */
export const DirEntrySchema = Type.Interface([FileStatSchema], { name: Type.String() }, { title: 'DirEntry' });

/** A context and a path (the rest of the URL) as path parameters. */
export const FileParamsSchema = Type.Object({ name: Type.String({ maxLength: 1024 }), '*': Type.String() });

export const ReadFileQuerySchema = Type.Object({ version: Type.Optional(Type.String({ maxLength: 128 })) }, strict);

export const WriteFileQuerySchema = Type.Object({
  mode: Type.Optional(Type.String({ pattern: '^0?[0-7]{3,4}$' })),
  format: Type.Optional(Type.Literal('tar')),
}, strict);

export const DeleteFileQuerySchema = Type.Object({ recursive: Type.Optional(Type.Boolean()) }, strict);

/** The version a write or a delete made. */
export const VersionResultSchema = Type.Object({ version: Type.String() });
