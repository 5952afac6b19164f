"""The errors the HTTP API answers with: one code table, one status per code.

A refused request gets its status, a one-line text/plain body (the message, then the hint), and
the code in the `X-Error-Code` header. The E2B SDK shows the body of a 404 verbatim and only the
status of anything else, so the message carries what a reader needs.
"""

from __future__ import annotations

from enum import Enum


class ErrorCode(str, Enum):
    BAD_REQUEST = "bad_request"                  # not JSON, not an object, contradictory fields
    INVALID_ARGUMENT = "invalid_argument"        # a field of the wrong type or out of range
    UNKNOWN_LANGUAGE = "unknown_language"        # a language this server does not know or cannot run
    CONTEXT_NOT_FOUND = "context_not_found"
    NOT_FOUND = "not_found"                      # no such route
    METHOD_NOT_ALLOWED = "method_not_allowed"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    KERNEL_START_FAILED = "kernel_start_failed"  # the context's kernel could not be started


STATUS: dict[ErrorCode, int] = {
    ErrorCode.BAD_REQUEST: 400,
    ErrorCode.INVALID_ARGUMENT: 422,
    ErrorCode.UNKNOWN_LANGUAGE: 400,
    ErrorCode.CONTEXT_NOT_FOUND: 404,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.METHOD_NOT_ALLOWED: 405,
    ErrorCode.PAYLOAD_TOO_LARGE: 413,
    ErrorCode.KERNEL_START_FAILED: 500,
}


class ApiError(Exception):
    """A request the server refuses; `hint` says how to fix it."""

    def __init__(self, code: ErrorCode, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.hint = hint

    @property
    def status(self) -> int:
        return STATUS[self.code]

    def body(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class KernelError(Exception):
    """A kernel that could not be started or died in a way the caller must hear about."""
