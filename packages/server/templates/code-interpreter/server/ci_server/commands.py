"""The closed set of things a request can ask for, and the parser from HTTP to them.

  GET    /health                 Health (`?kernels=started`: 503 until the default kernels started)
  POST   /execute                Execute {code, context_id?, language?, env_vars?}
  POST   /contexts               CreateContext {language?, cwd?}
  GET    /contexts               ListContexts
  DELETE /contexts/{id}          DeleteContext
  POST   /contexts/{id}/restart  RestartContext

Validation happens here: a command that parses is well-formed (the registry still checks that a
language can run here and that a context exists).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, Optional, Union

from .errors import ApiError, ErrorCode

MAX_CODE_BYTES = 10 * 1024 * 1024   # a cell's code, UTF-8
MAX_BODY_BYTES = 32 * 1024 * 1024   # a request body (JSON escapes make it larger than the code)
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Health:
    # `GET /health?kernels=started`: ready only once the default contexts' kernels have started (or
    # failed to), what a machine template waits for before its memory is saved. Plain /health
    # answers as soon as the server listens, as E2B's does.
    kernels: bool = False


@dataclass(frozen=True)
class Execute:
    code: str
    context_id: Optional[str] = None
    language: Optional[str] = None
    env_vars: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class CreateContext:
    language: Optional[str] = None
    cwd: Optional[str] = None


@dataclass(frozen=True)
class ListContexts:
    pass


@dataclass(frozen=True)
class DeleteContext:
    id: str


@dataclass(frozen=True)
class RestartContext:
    id: str


Command = Union[Health, Execute, CreateContext, ListContexts, DeleteContext, RestartContext]

_ROUTES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"/health"), "GET"),
    (re.compile(r"/execute"), "POST"),
    (re.compile(r"/contexts"), "GET POST"),
    (re.compile(r"/contexts/(?P<id>[^/]+)"), "DELETE"),
    (re.compile(r"/contexts/(?P<id>[^/]+)/restart"), "POST"),
]


def parse(method: str, path: str, body: bytes) -> Command:
    query = path.split("?", 1)[1] if "?" in path else ""
    path = path.split("?", 1)[0].rstrip("/") or "/"
    for pattern, methods in _ROUTES:
        m = pattern.fullmatch(path)
        if m is None:
            continue
        if method not in methods.split():
            raise ApiError(ErrorCode.METHOD_NOT_ALLOWED, f"{method} {path} is not allowed", f"use {methods}")
        id = m.groupdict().get("id")
        if path == "/health":
            return Health(kernels="kernels=started" in query.split("&"))
        if path == "/execute":
            return _execute(_object(body, required=True))
        if path == "/contexts":
            return ListContexts() if method == "GET" else _create(_object(body, required=False))
        assert id is not None
        return DeleteContext(id) if method == "DELETE" else RestartContext(id)
    raise ApiError(ErrorCode.NOT_FOUND, f"no route {method} {path}")


def _object(body: bytes, required: bool) -> dict[str, Any]:
    if not body.strip():
        if required:
            raise ApiError(ErrorCode.BAD_REQUEST, "the request has no body", "send a JSON object")
        return {}
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise ApiError(ErrorCode.BAD_REQUEST, f"the body is not JSON: {e}", "send a JSON object") from e
    if not isinstance(value, dict):
        raise ApiError(ErrorCode.BAD_REQUEST, "the body is not a JSON object", "send a JSON object")
    return value


def _optional_str(obj: dict[str, Any], key: str) -> Optional[str]:
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise ApiError(ErrorCode.INVALID_ARGUMENT, f"{key} must be a string")
    return value


def _execute(obj: dict[str, Any]) -> Execute:
    code = obj.get("code")
    if not isinstance(code, str):
        raise ApiError(ErrorCode.INVALID_ARGUMENT, "code must be a string", "send {\"code\": \"...\"}")
    size = len(code.encode("utf-8", "surrogatepass"))
    if size > MAX_CODE_BYTES:
        raise ApiError(ErrorCode.INVALID_ARGUMENT, f"code is {size} bytes, over the limit of {MAX_CODE_BYTES}",
                       "send at most 10 MiB of code; put large data in a file")
    context_id = _optional_str(obj, "context_id")
    language = _optional_str(obj, "language")
    if context_id is not None and language is not None:
        raise ApiError(ErrorCode.BAD_REQUEST, "context_id and language cannot both be set",
                       "a context has its language: pass one of them")
    env = obj.get("env_vars")
    if env is None:
        env = {}
    if not isinstance(env, dict):
        raise ApiError(ErrorCode.INVALID_ARGUMENT, "env_vars must be an object of strings")
    for k, v in env.items():
        if not ENV_NAME.fullmatch(k):
            raise ApiError(ErrorCode.INVALID_ARGUMENT, f"env_vars: {k!r} is not a variable name",
                           "names are letters, digits and _, not starting with a digit")
        if not isinstance(v, str) or "\0" in v:
            raise ApiError(ErrorCode.INVALID_ARGUMENT, f"env_vars: the value of {k} must be a string without NUL")
    return Execute(code=code, context_id=context_id, language=language, env_vars=dict(env))


def _create(obj: dict[str, Any]) -> CreateContext:
    language = _optional_str(obj, "language")
    cwd = _optional_str(obj, "cwd")
    if cwd is not None and (not os.path.isabs(cwd) or "\0" in cwd):
        raise ApiError(ErrorCode.INVALID_ARGUMENT, f"cwd must be an absolute path, not {cwd!r}")
    return CreateContext(language=language, cwd=os.path.normpath(cwd) if cwd is not None else None)
