"""The HTTP side: HTTP/1.1 with keep-alive, one thread per connection.

Requests are parsed into commands (commands.py) and carried out against the registry; nothing
below knows about HTTP. An execution answers 200 at once, then streams its lines with chunked
transfer encoding; an error found before that is a status with a text body (errors.py).

Connections send without Nagle's algorithm (TCP_NODELAY): a response is several small writes
(the head, then each line), and with it every write after the first waited for the client's
acknowledgement of the one before: ~3 ms of a plain answer through the host's path to the port
under TCG, up to 40 ms for a client in the guest (Linux delays its acknowledgements). A plain
answer's head and body go out in one write; so do an execution's head, its `number_of_executions`
and the first line after them (or what of them is held when the execution's loop next ticks),
and its last line with the stream's end.
"""

from __future__ import annotations

import json
import logging
import select
import socket
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from . import execution, results
from .commands import (MAX_BODY_BYTES, Command, CreateContext, DeleteContext, Execute, Health, ListContexts,
                       RestartContext, parse)
from .contexts import Registry
from .errors import ApiError, ErrorCode
from .results import Event

log = logging.getLogger(__name__)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], registry: Registry) -> None:
        self.registry = registry
        super().__init__(address, Handler)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "shellbase-code-interpreter"
    timeout = 600  # seconds: an idle keep-alive connection is closed, and so is a client that stops reading
    disable_nagle_algorithm = True
    server: Server

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    # Dispatch.
    def _handle(self, method: str) -> None:
        self._streaming = False
        try:
            command = parse(method, self.path, self._body())
            self._run(command)
        except ApiError as e:
            self._text(e.status, e.body(), {"X-Error-Code": e.code.value})
        except Exception as e:
            log.exception("%s %s failed", method, self.path)
            self.close_connection = True
            if not self._streaming:
                self._text(500, f"internal error: {e}")

    def _body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            self.close_connection = True
            raise ApiError(ErrorCode.BAD_REQUEST, "chunked request bodies are not supported", "send Content-Length")
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0:
            self.close_connection = True
            raise ApiError(ErrorCode.BAD_REQUEST, "bad Content-Length")
        if length > MAX_BODY_BYTES:
            self.close_connection = True  # the body is not read, so the connection cannot be reused
            raise ApiError(ErrorCode.PAYLOAD_TOO_LARGE, f"the body is {length} bytes, over {MAX_BODY_BYTES}",
                           "send at most 10 MiB of code")
        return self.rfile.read(length) if length else b""

    def _run(self, command: Command) -> None:
        registry = self.server.registry
        if isinstance(command, Health):
            if command.kernels and not registry.defaults_started():
                self._text(503, "the default kernels are starting")
            else:
                self._text(200, "OK")
        elif isinstance(command, ListContexts):
            self._json(200, [ctx.to_json() for ctx in registry.list()])
        elif isinstance(command, CreateContext):
            self._json(200, registry.create(command.language, command.cwd).to_json())
        elif isinstance(command, DeleteContext):
            registry.delete(command.id)
            self._json(200, None)
        elif isinstance(command, RestartContext):
            registry.restart(command.id)
            self._json(200, None)
        elif isinstance(command, Execute):
            self._execute(command)

    def _execute(self, command: Execute) -> None:
        registry = self.server.registry
        ctx = registry.target(command.context_id, command.language)
        self._streaming = True
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-store")
        sink = _ChunkedSink(self, self._head())
        clean = execution.run(ctx, command.code, dict(command.env_vars), sink) and sink.finish()
        if not clean:
            self.close_connection = True

    # Plain answers.
    def _text(self, status: int, text: str, headers: dict[str, str] | None = None) -> None:
        self._send(status, "text/plain; charset=utf-8", text.encode(), headers)

    def _json(self, status: int, value: Any) -> None:
        self._send(status, "application/json", json.dumps(value).encode())

    def _send(self, status: int, content_type: str, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.wfile.write(self._head() + body)

    def _head(self) -> bytes:
        """The response's head, ended, taken from the handler (which `end_headers` would write alone)."""
        head = b"".join(self._headers_buffer) + b"\r\n"
        self._headers_buffer = []
        return head


class _ChunkedSink:
    """An execution's lines as HTTP chunks, one line per chunk. The response's head and the
    `number_of_executions` line are held and go out with the next line (or at `flush`); every other
    line is written as it comes, but the last (`end_of_execution`), which `finish` writes with the
    stream's end."""

    def __init__(self, handler: Handler, head: bytes) -> None:
        self._handler = handler
        self._held = head
        self._last = b""

    def send(self, event: Event) -> bool:
        data = json.dumps(event, ensure_ascii=False).encode() + b"\n"
        chunk = b"%x\r\n%s\r\n" % (len(data), data)
        if event["type"] == results.END["type"]:
            self._last = chunk
            return True
        if event["type"] == results.NUMBER:
            self._held += chunk
            return True
        held, self._held = self._held, b""
        return self._write(held + chunk)

    def flush(self) -> bool:
        held, self._held = self._held, b""
        return self._write(held) if held else True

    def finish(self) -> bool:
        """Ends the stream (what is held, the last line, then the terminating chunk); False if the client is gone."""
        held, self._held = self._held, b""
        return self._write(held + self._last + b"0\r\n\r\n")

    def _write(self, data: bytes) -> bool:
        try:
            self._handler.wfile.write(data)
            return True
        except OSError:
            return False

    def gone(self) -> bool:
        sock = self._handler.connection
        try:
            readable, _, _ = select.select([sock], [], [], 0)
            return bool(readable) and sock.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True
