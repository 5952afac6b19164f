"""HTTP with the standard library: one connection per call, typed errors, timeouts, and cancellation."""

from __future__ import annotations

import errno
import http.client
import json
import os
import socket
import ssl
import threading
import urllib.parse
from contextvars import ContextVar
from email.message import Message
from pathlib import Path
from typing import IO, Literal, Mapping, Union

from ._wire import JsonObject
from .errors import (
    InvalidArgumentError,
    ShellbaseConnectionError,
    ShellbaseError,
    ShellbaseTimeoutError,
    error_from_body,
)

DEFAULT_URL = "http://127.0.0.1:7070"
#: Seconds to wait for a TCP connection (a server that answers at all answers this fast).
CONNECT_TIMEOUT = 10.0
USER_AGENT = "shellbase-python/0.1.0"

UrlSource = Literal["the url option", "SHELLBASE_URL", "the default"]
#: What a request may carry: JSON-able data goes in `json=`, bytes or a binary file in `body=`.
Body = Union[bytes, IO[bytes]]
#: A query parameter; a list repeats it.
QueryValue = Union[str, int, float, bool, None, "list[str]"]


def default_key() -> str | None:
    """SHELLBASE_API_KEY, else the admin key file of a server on this host ($SHELLBASE_HOME/admin.key)."""
    key = os.environ.get("SHELLBASE_API_KEY")
    if key:
        return key
    home = os.environ.get("SHELLBASE_HOME") or "/var/lib/shellbase"
    try:
        return (Path(home) / "admin.key").read_text().strip() or None
    except OSError:
        return None


def _shutdown(sock: socket.socket) -> None:
    """Ends the connection now, even under a thread blocked reading it (the server sees the client go away)."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class CancelScope:
    """Closes the connections of the calls made under it once cancelled (how the async client stops a call)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        self.cancelled = False

    def attach(self, sock: socket.socket) -> None:
        with self._lock:
            if self.cancelled:
                _shutdown(sock)
            else:
                self._socks.append(sock)

    def cancel(self) -> None:
        with self._lock:
            self.cancelled = True
            socks, self._socks = self._socks, []
        for sock in socks:
            _shutdown(sock)


#: The scope of the calls the current (async) task makes; None for plain synchronous calls.
current_scope: ContextVar[CancelScope | None] = ContextVar("shellbase_cancel_scope", default=None)


class Response:
    """An answer whose body has not been read yet; `abort()` drops the connection (stopping a stream's query)."""

    def __init__(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse, transport: Transport, timeout: float | None,
                 sock: socket.socket | None) -> None:
        self._conn = conn
        self._resp = resp
        # The connection's socket as it was sent on: an answer that closes the connection leaves `conn.sock` None.
        self._sock = sock
        self._transport = transport
        self._timeout = timeout
        self.url = transport.url
        self.status: int = resp.status
        self.headers: Message = resp.headers

    def read(self, size: int = -1) -> bytes:
        try:
            return self._resp.read(None if size < 0 else size)
        except OSError as e:
            raise self._transport.broken(e, self._timeout) from e

    def readline(self) -> bytes:
        try:
            return self._resp.readline()
        except OSError as e:
            raise self._transport.broken(e, self._timeout) from e

    def json(self) -> object:
        with self:
            data = self.read()
        return json.loads(data) if data else None

    def text(self) -> str:
        with self:
            return self.read().decode("utf-8", errors="replace")

    def close(self) -> None:
        self._resp.close()
        self._conn.close()

    def abort(self) -> None:
        """Drops the connection without reading on: the server stops what it was doing for it."""
        if self._sock is not None:
            _shutdown(self._sock)
        self.close()

    def __enter__(self) -> Response:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Transport:
    """The server's address, the key and the default timeout; sends requests and raises typed errors."""

    def __init__(self, url: str | None, api_key: str | None, timeout: float | None) -> None:
        from_env = os.environ.get("SHELLBASE_URL") or None
        self.url_source: UrlSource = "the url option" if url is not None else "SHELLBASE_URL" if from_env else "the default"
        self.url = (url if url is not None else from_env or DEFAULT_URL).rstrip("/")
        parts = urllib.parse.urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidArgumentError(
                f"{self.url!r} (from {self.url_source}) is not an http(s) URL",
                code="invalid_argument",
                hint="give a URL such as http://127.0.0.1:7070",
            )
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")
        self.api_key = api_key if api_key is not None else default_key()
        self.timeout = timeout

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, QueryValue] | None = None,
        json_body: object = None,
        body: Body | None = None,
        headers: Mapping[str, str] | None = None,
        accept: str = "application/json",
        timeout: float | None = None,
    ) -> Response:
        """Sends a request; any non-2xx answer is raised as its typed error. The caller closes the Response."""
        timeout = timeout if timeout is not None else self.timeout
        send_headers = {"Accept": accept, **self.identity(), **(headers or {})}
        payload: Body | None = body
        if json_body is not None:
            payload = json.dumps(json_body).encode()
            send_headers["Content-Type"] = "application/json"
        elif body is not None:
            send_headers.setdefault("Content-Type", "application/octet-stream")
        qs = urllib.parse.urlencode({k: v if isinstance(v, list) else _query_value(v) for k, v in (query or {}).items() if v is not None}, doseq=True)
        conn = self._connect(timeout)
        sock = conn.sock
        try:
            try:
                conn.request(method, f"{self.target(path)}{'?' + qs if qs else ''}", body=payload, headers=send_headers)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the server may have answered (413) before reading the whole body: read its answer
            resp = conn.getresponse()
        except OSError as e:
            conn.close()
            raise self.broken(e, timeout) from e
        except BaseException:  # KeyboardInterrupt and the like: the connection goes, and the server stops the work
            conn.close()
            raise
        response = Response(conn, resp, self, timeout, sock)
        if 200 <= resp.status < 300:
            return response
        raise self._error(response)

    def json(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, QueryValue] | None = None,
        json_body: object = None,
        body: Body | None = None,
        timeout: float | None = None,
    ) -> JsonObject:
        """Sends a request and returns its JSON object ({} for 204 No Content)."""
        data = self.request(method, path, query=query, json_body=json_body, body=body, timeout=timeout).json()
        return data if isinstance(data, dict) else {}

    def identity(self) -> dict[str, str]:
        """The headers every request carries: the client's name and the key."""
        headers = {"User-Agent": USER_AGENT}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def target(self, path: str) -> str:
        """An API path (`/v1/...`) as the request line names it, below the URL's own path."""
        return f"{self._prefix}{path}"

    def address(self) -> tuple[str, int, ssl.SSLContext | None]:
        """Where to open a raw connection: host, port, and the TLS context for an https URL."""
        port = self._port or (443 if self._https else 80)
        return self._host, port, ssl.create_default_context() if self._https else None

    def host_header(self) -> str:
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"{host}:{self._port}" if self._port else host

    def open_socket(self, timeout: float | None) -> socket.socket:
        """A TCP (TLS for https) connection to the server for protocols past HTTP's answers (tunnels), with
        `timeout` set on it and attached to the current cancel scope."""
        host, port, tls = self.address()
        connect_timeout = min(CONNECT_TIMEOUT, timeout) if timeout else CONNECT_TIMEOUT
        try:
            sock = socket.create_connection((host, port), timeout=connect_timeout)
        except OSError as e:
            raise self.unreachable(e) from e
        try:
            if tls is not None:
                sock = tls.wrap_socket(sock, server_hostname=host)
        except OSError as e:
            sock.close()
            raise self.unreachable(e) from e
        sock.settimeout(timeout)
        scope = current_scope.get()
        if scope is not None:
            scope.attach(sock)
        return sock

    def _connect(self, timeout: float | None) -> http.client.HTTPConnection:
        connect_timeout = min(CONNECT_TIMEOUT, timeout) if timeout else CONNECT_TIMEOUT
        cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        conn = cls(self._host, self._port, timeout=connect_timeout)
        try:
            conn.connect()
        except OSError as e:
            conn.close()
            raise self.unreachable(e) from e
        assert conn.sock is not None
        conn.sock.settimeout(timeout)
        scope = current_scope.get()
        if scope is not None:
            scope.attach(conn.sock)
        return conn

    def _error(self, response: Response) -> ShellbaseError:
        return answer_error(response.status, response.text())

    def unreachable(self, err: OSError) -> ShellbaseConnectionError:
        """Why a request never reached the server (refused, unresolvable, TLS), with the URL and where it came from."""
        if self.url_source == "SHELLBASE_URL":
            hint = "check that SHELLBASE_URL names a running shellbase server (`shellbase serve` or `npm start` starts one)"
        elif self.url_source == "the default":
            hint = (
                "start a server on this host (`npm start` in the checkout, or `shellbase serve`), or set SHELLBASE_URL "
                "to a server's URL; pass SHELLBASE_URL and SHELLBASE_API_KEY to agent code that runs elsewhere"
            )
        else:
            hint = "check the url option"
        return ShellbaseConnectionError(
            f"cannot reach the shellbase server at {self.url} (from {self.url_source}): {_why(err)}",
            code="unavailable",
            hint=hint,
            details={"url": self.url, "source": self.url_source},
        )

    def broken(self, err: OSError, timeout: float | None) -> ShellbaseError:
        """An error after the connection was made: no answer in time, or the connection dropped."""
        if isinstance(err, TimeoutError):
            within = f" within {timeout:g} s" if timeout else ""
            return ShellbaseTimeoutError(
                f"no answer from the shellbase server at {self.url}{within}; the call was abandoned"
                " (a query it ran is stopped)",
                code="unavailable",
                hint="pass a larger timeout= (or timeout=None on the client to wait as long as the server takes)",
                details={"url": self.url, "timeout": timeout},
            )
        return ShellbaseConnectionError(
            f"the connection to the shellbase server at {self.url} broke: {_why(err)}",
            code="unavailable",
            hint="the server may have restarted; retry the call",
            details={"url": self.url, "source": self.url_source},
        )


def answer_error(status: int, text: str) -> ShellbaseError:
    """The typed error of a non-2xx answer: its `{"error": {...}}` body, else an InternalError quoting it."""
    try:
        parsed = json.loads(text)
        if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
            return error_from_body(parsed["error"], status)
    except ValueError:
        pass
    return error_from_body({"code": "internal", "message": f"HTTP {status}: {text[:500]}"}, status)


def _why(err: OSError) -> str:
    if isinstance(err, TimeoutError):
        return "timed out"
    if err.errno and err.errno > 0 and err.errno in errno.errorcode:
        return f"{errno.errorcode[err.errno]} ({err.strerror})"
    return str(err) or type(err).__name__


def _query_value(value: str | int | float | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
