import { type ErrorBody, type ErrorCode } from '@shellbase/protocol';

/**
 * An error the server reported, with its code, details and a hint on how to fix it. `message` is
 * the server's message followed by the hint in parentheses; `reason` is the message alone (for a
 * display that shows the hint apart).
 */
export class ShellbaseError extends Error {
  readonly code: ErrorCode;
  readonly reason: string;
  readonly status: number;
  readonly details?: Record<string, unknown>;
  readonly hint?: string;

  constructor(body: ErrorBody, status: number, options?: { cause?: unknown }) {
    super(body.hint ? `${body.message} (${body.hint})` : body.message, options);
    this.name = new.target.name;
    this.code = body.code;
    this.reason = body.message;
    this.status = status;
    this.details = body.details;
    this.hint = body.hint;
  }
}

export class InvalidArgumentError extends ShellbaseError {}
export class UnauthorizedError extends ShellbaseError {}
export class ForbiddenError extends ShellbaseError {}
export class NotFoundError extends ShellbaseError {}
export class AlreadyExistsError extends ShellbaseError {}
export class ConflictError extends ShellbaseError {}
export class PayloadTooLargeError extends ShellbaseError {}
export class LimitExceededError extends ShellbaseError {}
export class FailedPreconditionError extends ShellbaseError {}
export class UnavailableError extends ShellbaseError {}
/** The server could not be reached at all (details: url, source). */
export class ConnectionError extends UnavailableError {}
export class InternalError extends ShellbaseError {}

const CLASSES: Record<ErrorCode, typeof ShellbaseError> = {
  invalid_argument: InvalidArgumentError,
  unauthorized: UnauthorizedError,
  forbidden: ForbiddenError,
  not_found: NotFoundError,
  already_exists: AlreadyExistsError,
  conflict: ConflictError,
  payload_too_large: PayloadTooLargeError,
  limit_exceeded: LimitExceededError,
  failed_precondition: FailedPreconditionError,
  unavailable: UnavailableError,
  internal: InternalError,
};

export function errorFromBody(body: ErrorBody, status: number, cause?: unknown): ShellbaseError {
  const Cls = CLASSES[body.code] ?? InternalError;
  return new Cls(body, status, { cause });
}
