"""Exceptions: one class per API error code, each with the server's message, hint and details."""

from __future__ import annotations

import builtins
from typing import Literal, Mapping, cast

ErrorCode = Literal[
    "invalid_argument",
    "unauthorized",
    "forbidden",
    "not_found",
    "already_exists",
    "conflict",
    "payload_too_large",
    "limit_exceeded",
    "failed_precondition",
    "unavailable",
    "internal",
]


class ShellbaseError(Exception):
    """An error the server reported (or the client met), with its code, details and a hint on how to fix it."""

    code: ErrorCode
    #: The HTTP status (0 when no answer came: connection failures and client timeouts).
    status: int
    message: str
    hint: str | None
    details: dict[str, object]

    def __init__(
        self,
        message: str,
        *,
        code: ErrorCode = "internal",
        status: int = 0,
        hint: str | None = None,
        details: Mapping[str, object] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.status = status
        self.message = message
        self.hint = hint
        self.details = dict(details or {})

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, status={self.status}, message={self.message!r}, hint={self.hint!r})"


class InvalidArgumentError(ShellbaseError):
    """400: the request was malformed or named something impossible."""


class UnauthorizedError(ShellbaseError):
    """401: no API key, or one the server does not know (or revoked)."""


class ForbiddenError(ShellbaseError):
    """403: the key is valid but may not do this (admin routes, another tenant's usage)."""


class NotFoundError(ShellbaseError):
    """404: no such context, version, file, service, machine or snapshot for this tenant."""


class AlreadyExistsError(ShellbaseError):
    """409: a context, tenant or service of that name exists."""


class ConflictError(ShellbaseError):
    """409: a write or merge overlapped changes committed meanwhile (`paths`; the attempted change is `version`)."""

    @property
    def paths(self) -> list[str]:
        paths = self.details.get("paths")
        return [str(p) for p in paths] if isinstance(paths, list) else []

    @property
    def version(self) -> str | None:
        version = self.details.get("version")
        return version if isinstance(version, str) else None


class PayloadTooLargeError(ShellbaseError):
    """413: a body over the server's limit."""


class LimitExceededError(ShellbaseError):
    """429: over a quota or a limit (`quota` names it); nothing was created."""

    @property
    def quota(self) -> str | None:
        quota = self.details.get("quota")
        return quota if isinstance(quota, str) else None


#: The same class under the name agents look for.
QuotaError = LimitExceededError


class FailedPreconditionError(ShellbaseError):
    """412: the object is in a state that does not allow this (a paused machine, unrelated histories)."""


class UnavailableError(ShellbaseError):
    """503: the server (or a service's process) cannot answer now."""


class InternalError(ShellbaseError):
    """500, or an answer that was not shellbase's error form."""


class ShellbaseConnectionError(UnavailableError, builtins.ConnectionError):
    """The server could not be reached at all (details: url, source); also a builtins.ConnectionError."""


class ShellbaseTimeoutError(UnavailableError, builtins.TimeoutError):
    """No answer within the client's `timeout`; the connection is closed, which stops a query on the server."""


ERROR_CLASSES: dict[str, type[ShellbaseError]] = {
    "invalid_argument": InvalidArgumentError,
    "unauthorized": UnauthorizedError,
    "forbidden": ForbiddenError,
    "not_found": NotFoundError,
    "already_exists": AlreadyExistsError,
    "conflict": ConflictError,
    "payload_too_large": PayloadTooLargeError,
    "limit_exceeded": LimitExceededError,
    "failed_precondition": FailedPreconditionError,
    "unavailable": UnavailableError,
    "internal": InternalError,
}


def error_from_body(body: Mapping[str, object], status: int) -> ShellbaseError:
    """The typed error for a wire error `{"code", "message", "details"?, "hint"?}`."""
    raw = body.get("code")
    code: ErrorCode = cast(ErrorCode, raw) if isinstance(raw, str) and raw in ERROR_CLASSES else "internal"
    hint = body.get("hint")
    details = body.get("details")
    return ERROR_CLASSES[code](
        str(body.get("message", "")),
        code=code,
        status=status,
        hint=hint if isinstance(hint, str) else None,
        details=details if isinstance(details, dict) else None,
    )
