import { HTTP_STATUS, type ErrorBody, type ErrorCode } from '@shellbase/protocol';

export interface ShellbaseErrorOptions {
  details?: Record<string, unknown>;
  hint?: string;
  cause?: unknown;
}

/** The one error type that crosses boundaries: a code, a message and how to fix it. */
export class ShellbaseError extends Error {
  readonly code: ErrorCode;
  readonly details?: Record<string, unknown>;
  readonly hint?: string;

  constructor(code: ErrorCode, message: string, options: ShellbaseErrorOptions = {}) {
    super(message, { cause: options.cause });
    this.name = 'ShellbaseError';
    this.code = code;
    this.details = options.details;
    this.hint = options.hint;
  }

  get status(): number {
    return HTTP_STATUS[this.code];
  }

  toBody(): ErrorBody {
    const body: ErrorBody = { code: this.code, message: this.message };
    if (this.details) body.details = this.details;
    if (this.hint) body.hint = this.hint;
    return body;
  }
}

export const invalid = (message: string, hint?: string, details?: Record<string, unknown>) =>
  new ShellbaseError('invalid_argument', message, { hint, details });

export const notFound = (what: string, name: string) =>
  new ShellbaseError('not_found', `${what} ${JSON.stringify(name)} does not exist`, { details: { [what]: name } });
