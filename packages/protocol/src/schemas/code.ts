import { Type } from 'typebox';
import { CODE_MAX_CHARS } from '../constants.js';
import { EnvSchema, ErrorEventSchema, OutputEventSchema, TimeoutMsSchema, strict } from './common.js';

/**
 * Code in a machine's interpreter (`POST /v1/machines/{id}/code`): a cell run in a long-lived
 * kernel of the machine's code interpreter (the `code-interpreter` image serves it on guest port
 * 49999, the protocol of E2B's code interpreter), its results and the lines of its NDJSON stream.
 */

export const RunCodeRequestSchema = Type.Object({
  code: Type.String({ maxLength: CODE_MAX_CHARS }),
  /** `python` (default), `javascript`/`js`, `typescript`/`ts`, `r`, `bash`: that language's default context. */
  language: Type.Optional(Type.String({ minLength: 1, maxLength: 32 })),
  /** A context the interpreter made (its id); not with `language`. */
  context: Type.Optional(Type.String({ minLength: 1, maxLength: 128 })),
  /** Variables for this cell only (reverted after it). */
  envs: Type.Optional(EnvSchema),
  /** How long the cell may run (it is interrupted then; the kernel keeps its state). Default 60 s. */
  timeoutMs: Type.Optional(TimeoutMsSchema),
}, strict);

/** One output of a cell: its value (`isMainResult`) or something it displayed, in each format it has. */
export const CodeResultSchema = Type.Object({
  isMainResult: Type.Boolean(),
  text: Type.Optional(Type.String()),
  html: Type.Optional(Type.String()),
  markdown: Type.Optional(Type.String()),
  /** SVG markup. */
  svg: Type.Optional(Type.String()),
  /** Base64. */
  png: Type.Optional(Type.String()),
  jpeg: Type.Optional(Type.String()),
  pdf: Type.Optional(Type.String()),
  latex: Type.Optional(Type.String()),
  json: Type.Optional(Type.Unknown()),
  javascript: Type.Optional(Type.String()),
  /** A pandas DataFrame as columns of values. */
  data: Type.Optional(Type.Unknown()),
  /** A matplotlib figure described as a chart (type, title, axes, elements). */
  chart: Type.Optional(Type.Unknown()),
  /** Formats of no field above, by MIME type. */
  extra: Type.Optional(Type.Record(Type.String(), Type.Unknown())),
}, { title: 'CodeResult' });

/** An error the code raised (not an error of the API). */
export const CodeErrorSchema = Type.Object({
  name: Type.String(), value: Type.String(), traceback: Type.String(),
}, { title: 'CodeError' });

/** A cell's whole outcome (the JSON answer). */
export const CodeExecutionSchema = Type.Object({
  results: Type.Array(CodeResultSchema),
  stdout: Type.Array(Type.String()),
  stderr: Type.Array(Type.String()),
  error: Type.Optional(CodeErrorSchema),
  /** The cell's number in its context (In[n]). */
  executionCount: Type.Optional(Type.Integer()),
}, { title: 'CodeExecution' });

/** The lines of `POST /v1/machines/{id}/code` with `Accept: application/x-ndjson`. */
export const CodeEventSchema = Type.Union([
  Type.Object({ type: Type.Literal('count'), executionCount: Type.Integer() }),
  OutputEventSchema,
  Type.Object({ type: Type.Literal('result'), result: CodeResultSchema }),
  Type.Object({ type: Type.Literal('exception'), error: CodeErrorSchema }),
  Type.Object({ type: Type.Literal('end') }),
  ErrorEventSchema,
]);
