/** Every error shellbase reports carries one of these codes (api-v1.md, "Errors"). */
export const ERROR_CODES = [
  'invalid_argument',
  'unauthorized',
  'forbidden',
  'not_found',
  'already_exists',
  'conflict',
  'payload_too_large',
  'limit_exceeded',
  'failed_precondition',
  'unavailable',
  'internal',
] as const;

export type ErrorCode = (typeof ERROR_CODES)[number];

/** The one code-to-HTTP-status table. Exhaustive: adding a code without a status fails to compile. */
export const HTTP_STATUS: Record<ErrorCode, number> = {
  invalid_argument: 400,
  unauthorized: 401,
  forbidden: 403,
  not_found: 404,
  already_exists: 409,
  conflict: 409,
  payload_too_large: 413,
  limit_exceeded: 429,
  failed_precondition: 412,
  unavailable: 503,
  internal: 500,
};

export function isErrorCode(value: unknown): value is ErrorCode {
  return typeof value === 'string' && (ERROR_CODES as readonly string[]).includes(value);
}
