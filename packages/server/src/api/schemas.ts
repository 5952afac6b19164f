import { ContextSchema, ErrorResponseSchema, ExecResultSchema, VersionSchema } from '@shellbase/protocol/schemas';

/**
 * The server's side of the API's schemas: which statuses a route answers with an error. The
 * schemas themselves (requests, responses, the error body) are @shellbase/protocol's
 * (`@shellbase/protocol/schemas`), where the wire types are derived from them.
 */

/** The shared schemas server.ts registers by their `$id` (the OpenAPI document's components). */
export { ContextSchema as Context, ErrorResponseSchema as ErrorResponse, ExecResultSchema as ExecResult, VersionSchema as Version };

export const errorResponses = {
  400: ErrorResponseSchema, 401: ErrorResponseSchema, 404: ErrorResponseSchema, 409: ErrorResponseSchema, 413: ErrorResponseSchema,
  412: ErrorResponseSchema, 500: ErrorResponseSchema,
};
