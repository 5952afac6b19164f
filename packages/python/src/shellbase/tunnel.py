"""Plain TCP to a service through the API, and a local port that tunnels each connection to it.

The protocol: `GET /v1/contexts/{name}/services/{svc}/connect` with `Connection: Upgrade`,
`Upgrade: shellbase-tcp` and the API key. The server wakes the service and, once its port accepts,
answers `101 Switching Protocols`; from then on the connection carries the service's bytes both ways
until either side closes. Any other answer is the API's JSON error with its status.
"""

from __future__ import annotations

import http.client
import io
import logging
import socket
import threading
from typing import Callable

from ._http import Transport, answer_error
from .errors import InternalError, ShellbaseError

#: The Upgrade protocol of the API's TCP tunnels.
PROTOCOL = "shellbase-tcp"
#: The most an answer's head (status line and headers) may take.
MAX_HEAD = 64 * 1024
#: The most of an error answer's body that is read.
MAX_ERROR_BODY = 1 << 20
CHUNK = 64 * 1024

log = logging.getLogger("shellbase")


def upgrade_request(transport: Transport, path: str, upgrade: dict[str, str] | None = None) -> bytes:
    """The request that asks the API to turn this connection into what `upgrade` names (default: a tunnel) at `path`."""
    headers = {"Host": transport.host_header(), "Connection": "Upgrade", **(upgrade or {"Upgrade": PROTOCOL}), **transport.identity()}
    lines = [f"GET {transport.target(path)} HTTP/1.1", *(f"{k}: {v}" for k, v in headers.items()), "", ""]
    return "\r\n".join(lines).encode("latin-1")


def parse_head(head: bytes) -> tuple[int, http.client.HTTPMessage]:
    """The status and headers of an answer's head (up to and including its blank line)."""
    status_line, _, rest = head.partition(b"\r\n")
    parts = status_line.split(None, 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
        raise InternalError(f"the server answered the tunnel with {status_line[:200]!r}, not HTTP", code="internal")
    return int(parts[1]), http.client.parse_headers(io.BytesIO(rest))


def check_switch(headers: http.client.HTTPMessage) -> None:
    """A 101 must switch to the tunnel protocol and nothing else."""
    upgrade = headers.get("Upgrade", "")
    if upgrade.lower() != PROTOCOL:
        raise InternalError(f"the server switched the tunnel to {upgrade!r}, not {PROTOCOL}", code="internal")


def body_length(headers: http.client.HTTPMessage) -> int | None:
    """An error answer's Content-Length (None: the body runs to the end of the connection)."""
    value = headers.get("Content-Length")
    return min(int(value), MAX_ERROR_BODY) if value and value.isdigit() else None


def _read_head(sock: socket.socket) -> bytes:
    # A byte at a time: whatever follows the head is the service's, and stays in the socket.
    head = bytearray()
    while not head.endswith(b"\r\n\r\n"):
        byte = sock.recv(1)
        if not byte:
            raise ConnectionResetError("the server closed the connection before answering")
        head += byte
        if len(head) > MAX_HEAD:
            raise InternalError(f"the server's answer to the tunnel has a head over {MAX_HEAD} bytes", code="internal")
    return bytes(head)


def _read_body(sock: socket.socket, length: int | None) -> bytes:
    body = bytearray()
    limit = MAX_ERROR_BODY if length is None else length
    while len(body) < limit:
        chunk = sock.recv(min(CHUNK, limit - len(body)))
        if not chunk:
            break
        body += chunk
    return bytes(body)


def open_tunnel(transport: Transport, path: str) -> socket.socket:
    """A connected socket to what `path` names (a service's `/connect`), once it accepted; blocking, no timeout.

    Waits for the service to wake up to the client's `timeout`; raises the API's typed error otherwise.
    """
    return open_upgraded(transport, path, None, check_switch)


def open_upgraded(transport: Transport, path: str, upgrade: dict[str, str] | None,
                  check: Callable[[http.client.HTTPMessage], None]) -> socket.socket:
    """The connection once the API switched it as `upgrade` asks (checked by `check`); blocking, no timeout.

    Raises the API's typed error when it answered instead, and closes the socket on any failure.
    """
    sock = transport.open_socket(transport.timeout)
    try:
        try:
            sock.sendall(upgrade_request(transport, path, upgrade))
            status, headers = parse_head(_read_head(sock))
            if status != 101:
                raise answer_error(status, _read_body(sock, body_length(headers)).decode("utf-8", errors="replace"))
        except ShellbaseError:
            raise
        except OSError as e:
            raise transport.broken(e, transport.timeout) from e
        check(headers)
    except BaseException:
        sock.close()
        raise
    sock.settimeout(None)
    return sock


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    """Copies until `source` ends, then ends `sink`'s sending side (the other direction goes on)."""
    try:
        while chunk := source.recv(CHUNK):
            sink.sendall(chunk)
        sink.shutdown(socket.SHUT_WR)
    except OSError:
        # One side went away: both go, which ends the copy the other way too.
        _cut(source)
        _cut(sink)


def _cut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class LocalTunnel:
    """A local port whose every connection is tunnelled to a service (a fresh tunnel each).

    A tunnel that cannot open closes its local connection and goes to `on_error` (by default, a
    warning on the `shellbase` logger). `close()` (or leaving a `with` block) stops listening and
    cuts the open connections.
    """

    def __init__(self, open: Callable[[], socket.socket], *, host: str = "127.0.0.1", port: int = 0,
                 on_error: Callable[[ShellbaseError], None] | None = None) -> None:
        self._open = open
        self._on_error = on_error
        self._lock = threading.Lock()
        self._socks: set[socket.socket] = set()
        self._closed = False
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
        self._listener = socket.create_server((host, port), family=family)
        self.host: str = host
        self.port: int = int(self._listener.getsockname()[1])
        self._acceptor = threading.Thread(target=self._accept, name=f"shellbase-tunnel-{self.port}", daemon=True)
        self._acceptor.start()

    def __repr__(self) -> str:
        return f"<LocalTunnel {self.host}:{self.port}{' closed' if self._closed else ''}>"

    def _accept(self) -> None:
        while True:
            try:
                local, _ = self._listener.accept()
            except OSError:
                return  # closed
            if not self._track(local):
                local.close()
                return
            threading.Thread(target=self._serve, args=(local,), daemon=True).start()

    def _track(self, sock: socket.socket) -> bool:
        with self._lock:
            if self._closed:
                return False
            self._socks.add(sock)
            return True

    def _forget(self, *socks: socket.socket) -> None:
        with self._lock:
            self._socks.difference_update(socks)
        for sock in socks:
            sock.close()

    def _serve(self, local: socket.socket) -> None:
        try:
            remote = self._open()
        except ShellbaseError as e:
            # Reported before the local connection closes: whoever sees it close finds the reason there.
            self._report(e)
            self._forget(local)
            return
        except BaseException:
            self._forget(local)
            raise
        if not self._track(remote):
            self._forget(local, remote)
            return
        back = threading.Thread(target=_pipe, args=(remote, local), daemon=True)
        back.start()
        _pipe(local, remote)
        back.join()
        self._forget(local, remote)

    def _report(self, error: ShellbaseError) -> None:
        if self._on_error is not None:
            self._on_error(error)
        else:
            log.warning("a connection to %s:%d could not be tunnelled: %s", self.host, self.port, error)

    def close(self) -> None:
        """Stops listening and cuts the open connections."""
        with self._lock:
            self._closed = True
            socks, self._socks = self._socks, set()
        _cut(self._listener)  # wakes the blocked accept()
        self._listener.close()
        for sock in socks:
            _cut(sock)
        self._acceptor.join()

    def __enter__(self) -> LocalTunnel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
