import { Type } from 'typebox';
import { EnvSchema, ErrorEventSchema, OutputEventSchema, strict } from './common.js';
import { ContextConfigSchema } from './contexts.js';

/** OCI images (pull, import, list, delete) and Dockerfile builds, with their NDJSON progress lines. */

const RefSchema = Type.String({ minLength: 1, maxLength: 512 });

export const ImageConfigSchema = Type.Object({
  env: EnvSchema, cwd: Type.Optional(Type.String()), user: Type.Optional(Type.String()),
  ...ContextConfigSchema.properties,
}, { title: 'ImageConfig', description: "An OCI image's config as shellbase keeps it: its defaults and what it would run." });

export const ImageSchema = Type.Object({
  /** Normalized reference, e.g. `docker.io/library/python:3.12-slim`. */
  ref: Type.String(),
  /** The digest of its manifest. */
  digest: Type.String(),
  /** Its root version (the image's layers, bottom first). */
  version: Type.String(),
  layers: Type.Integer(),
  /** Bytes of its layers' files, unpacked. */
  bytes: Type.Integer(),
  createdAt: Type.String(),
  config: ImageConfigSchema,
}, { $id: 'Image', title: 'Image', description: 'An OCI image a tenant pulled or imported; `POST /v1/contexts {image: ref}` makes contexts of it.' });

export const PullBodySchema = Type.Object({ ref: RefSchema, insecure: Type.Optional(Type.Boolean()) }, strict);

export const ImportQuerySchema = Type.Object({ ref: Type.Optional(RefSchema) }, strict);

/** An image's reference as the rest of the URL. */
export const ImageRefParamsSchema = Type.Object({ '*': Type.String({ maxLength: 512 }) });

export const BuildQuerySchema = Type.Object({
  tag: Type.String({ minLength: 1, maxLength: 128 }), dockerfile: Type.Optional(Type.String({ minLength: 1, maxLength: 4096 })),
  noCache: Type.Optional(Type.Boolean()),
  /** Build arguments, each `NAME=VALUE` (repeat the parameter for more). */
  buildArg: Type.Optional(Type.Union([Type.String({ maxLength: 65536 }), Type.Array(Type.String({ maxLength: 65536 }), { maxItems: 256 })])),
}, strict);

export const BuildStepSchema = Type.Object({
  /** The instruction as written (continuations joined), with its stage: `[build 2/5] RUN make`. */
  instruction: Type.String(),
  cached: Type.Boolean(),
  /** The version after the step (config-only steps leave the previous one). */
  version: Type.String(),
  ms: Type.Number(),
}, { title: 'BuildStep', description: 'One step of a build as it ran: its Dockerfile line, whether it came from the cache, the version it made.' });

export const BuildResultSchema = Type.Object({
  context: Type.String(), version: Type.String(), steps: Type.Array(BuildStepSchema),
}, { $id: 'BuildResult', title: 'BuildResult' });

/** One line of a pull's or an import's NDJSON stream; the last is `image` (or `images`), or `error`. */
export const ImageEventSchema = Type.Union([
  Type.Object({
    type: Type.Literal('progress'), message: Type.String(),
    layer: Type.Optional(Type.String()), bytes: Type.Optional(Type.Number()), total: Type.Optional(Type.Number()),
  }),
  Type.Object({ type: Type.Literal('image'), image: ImageSchema }),
  Type.Object({ type: Type.Literal('images'), images: Type.Array(ImageSchema) }),
  ErrorEventSchema,
]);

/** One line of a build's NDJSON stream: a step starting or done, a RUN's output, then `result` (or `error`). */
export const BuildEventSchema = Type.Union([
  Type.Object({ type: Type.Literal('step'), index: Type.Integer(), total: Type.Integer(), instruction: Type.String(), line: Type.Integer() }),
  Type.Interface([BuildStepSchema], { type: Type.Literal('stepDone') }),
  OutputEventSchema,
  Type.Interface([BuildResultSchema], { type: Type.Literal('result') }),
  ErrorEventSchema,
]);
