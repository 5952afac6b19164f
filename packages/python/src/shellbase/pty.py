"""An interactive terminal in a machine: `GET /v1/machines/{id}/pty`, a WebSocket (RFC 6455).

The client offers the subprotocol `shellbase-pty` and sends the key in `Authorization`; binary
frames carry the terminal's bytes both ways, text frames JSON control messages (`resize` in,
`exit` or `error` out). Any answer but `101 Switching Protocols` is the API's JSON error.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import socket
import struct
import threading
from dataclasses import dataclass

from ._http import Transport
from .errors import InternalError, UnavailableError, error_from_body
from .tunnel import open_upgraded

PROTOCOL = "shellbase-pty"
# The largest message ``write`` sends.
_WRITE_CHUNK = 64 << 10


@dataclass(frozen=True)
class PtyExit:
    """How the shell ended: its exit code, or (None) the signal that ended it."""

    exit_code: int | None
    signal: str | None = None


class MachinePty:
    """Root's login shell on a terminal in a machine.

    `read()` returns the next bytes the terminal shows (b"" once the shell ended: `exit` says how),
    `write()` types, `resize()` changes its size, `close()` hangs up. Iterating yields output until
    the end. When the machine goes away under it (hibernated, stopped, deleted), `read()` raises the
    server's typed error.
    """

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buf = b""
        self._send_lock = threading.Lock()
        self.exit: PtyExit | None = None
        self._closed = False

    def __enter__(self) -> MachinePty:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self):  # type: ignore[no-untyped-def]
        while chunk := self.read():
            yield chunk

    def write(self, data: bytes | str) -> None:
        """Types ``data`` (sent in messages of at most 64 KiB: the server takes up to 1 MiB in one)."""
        raw = data.encode() if isinstance(data, str) else data
        for at in range(0, len(raw), _WRITE_CHUNK):
            self._frame(2, raw[at : at + _WRITE_CHUNK])

    def resize(self, cols: int, rows: int) -> None:
        self._frame(1, json.dumps({"type": "resize", "cols": cols, "rows": rows}).encode())

    def read(self) -> bytes:
        """The next output (blocking); b"" when the shell has ended or the connection closed."""
        while True:
            frame = self._next_frame()
            if frame is None:
                if self.exit is None and not self._closed:
                    raise UnavailableError("the PTY's connection closed before its shell ended", code="unavailable")
                return b""
            op, payload = frame
            if op == 2:
                return payload
            if op == 1:
                try:
                    msg = json.loads(payload)
                except ValueError:
                    msg = None
                if not isinstance(msg, dict):
                    continue  # not a control message this client knows
                if msg.get("type") == "exit":
                    self.exit = PtyExit(msg.get("exitCode"), msg.get("signal"))
                elif msg.get("type") == "error":
                    raise error_from_body(msg.get("error") or {}, 0)

    def close(self) -> None:
        """Hangs up (the shell gets SIGHUP) and closes the connection."""
        if self._closed:
            return
        self._closed = True
        try:
            self._frame(8, struct.pack("!H", 1000))
            self._sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        self._sock.close()

    def _frame(self, op: int, payload: bytes) -> None:
        """A masked frame, as a client must send."""
        n = len(payload)
        head = bytes([0x80 | op])
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 65536:
            head += bytes([0x80 | 126]) + struct.pack("!H", n)
        else:
            head += bytes([0x80 | 127]) + struct.pack("!Q", n)
        mask = os.urandom(4)
        body = bytes(b ^ mask[i & 3] for i, b in enumerate(payload))
        with self._send_lock:
            self._sock.sendall(head + mask + body)

    def _recv(self, n: int) -> bytes | None:
        while len(self._buf) < n:
            try:
                chunk = self._sock.recv(65536)
            except OSError:
                return None
            if not chunk:
                return None
            self._buf += chunk
        out, self._buf = self._buf[:n], self._buf[n:]
        return out

    def _next_frame(self) -> tuple[int, bytes] | None:
        """The next whole message (fragments joined; pings answered); None when the connection ended."""
        parts: list[bytes] = []
        kind = 0
        while True:
            head = self._recv(2)
            if head is None:
                return None
            fin, op, size = head[0] & 0x80, head[0] & 0x0F, head[1] & 0x7F
            if size == 126:
                ext = self._recv(2)
                size = struct.unpack("!H", ext)[0] if ext else 0
            elif size == 127:
                ext = self._recv(8)
                size = struct.unpack("!Q", ext)[0] if ext else 0
            payload = self._recv(size) if size else b""
            if payload is None:
                return None
            if op == 9:
                self._frame(10, payload)
            elif op == 8:
                if not self._closed:
                    try:
                        self._frame(8, payload[:2])
                    except OSError:
                        pass
                return None
            elif op in (0, 1, 2):
                kind = kind or op
                parts.append(payload)
                if fin:
                    return kind, b"".join(parts)


def open_pty(transport: Transport, path: str) -> MachinePty:
    """Opens the PTY at `path` (blocking); the API's typed error when it refuses."""
    upgrade = {
        "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": base64.b64encode(os.urandom(16)).decode(), "Sec-WebSocket-Protocol": PROTOCOL,
    }

    def check(answer: http.client.HTTPMessage) -> None:
        if answer.get("Sec-WebSocket-Protocol", "") != PROTOCOL:
            raise InternalError(f"the server answered the PTY with {answer.get('Sec-WebSocket-Protocol')!r}, not {PROTOCOL}", code="internal")

    return MachinePty(open_upgraded(transport, path, upgrade, check))
