"""TCP tunnels to services for asyncio: the protocol of `shellbase.tunnel`, on asyncio streams."""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable

from .._http import Transport, answer_error
from ..errors import InternalError, ShellbaseError
from ..tunnel import CHUNK, MAX_HEAD, body_length, check_switch, log, parse_head, upgrade_request

#: A connection as asyncio gives it.
Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def open_tunnel(transport: Transport, path: str) -> Streams:
    """A connection to what `path` names (a service's `/connect`), once it accepted; or the API's typed error.

    Waits for the service to wake up to the client's `timeout` (cancel the task to give up sooner).
    """
    host, port, tls = transport.address()
    try:
        reader, writer = await asyncio.open_connection(host, port, ssl=tls, limit=MAX_HEAD)
    except OSError as e:
        raise transport.unreachable(e) from e
    try:
        try:
            async with asyncio.timeout(transport.timeout):
                writer.write(upgrade_request(transport, path))
                # The reader keeps what follows the head: the service's first bytes stay readable.
                status, headers = parse_head(await reader.readuntil(b"\r\n\r\n"))
                if status != 101:
                    length = body_length(headers)
                    body = await (reader.read() if length is None else reader.readexactly(length))
                    raise answer_error(status, body.decode("utf-8", errors="replace"))
        except ShellbaseError:
            raise
        except asyncio.LimitOverrunError as e:
            raise InternalError(f"the server's answer to the tunnel has a head over {MAX_HEAD} bytes", code="internal") from e
        except asyncio.IncompleteReadError as e:
            raise transport.broken(ConnectionResetError("the server closed the connection before answering"), None) from e
        except (TimeoutError, OSError) as e:
            raise transport.broken(e, transport.timeout) from e
        check_switch(headers)
    except BaseException:
        writer.close()
        raise
    return reader, writer


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copies until `reader` ends, then ends `writer`'s sending side (the other direction goes on)."""
    while chunk := await reader.read(CHUNK):
        writer.write(chunk)
        await writer.drain()
    if writer.can_write_eof():
        writer.write_eof()


class AsyncLocalTunnel:
    """A local port whose every connection is tunnelled to a service (a fresh tunnel each), on the running loop.

    A tunnel that cannot open closes its local connection and goes to `on_error` (by default, a
    warning on the `shellbase` logger). `await close()` (or leaving `async with`) stops listening
    and cuts the open connections.
    """

    def __init__(self, open: Callable[[], Awaitable[Streams]], on_error: Callable[[ShellbaseError], None] | None) -> None:
        self._open = open
        self._on_error = on_error
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.host = ""
        self.port = 0

    async def listen(self, host: str, port: int) -> AsyncLocalTunnel:
        self._server = await asyncio.start_server(self._serve, host, port)
        self.host = host
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    def __repr__(self) -> str:
        return f"<AsyncLocalTunnel {self.host}:{self.port}>"

    async def _serve(self, local_reader: asyncio.StreamReader, local_writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            try:
                remote_reader, remote_writer = await self._open()
            except ShellbaseError as e:
                self._report(e)
                return
            try:
                # Either side failing (or close() cancelling) ends both directions.
                async with asyncio.TaskGroup() as group:
                    group.create_task(_pipe(local_reader, remote_writer))
                    group.create_task(_pipe(remote_reader, local_writer))
            except* OSError:
                pass  # one side went away: both are closed below
            finally:
                remote_writer.close()
        finally:
            self._tasks.discard(task)
            local_writer.close()

    def _report(self, error: ShellbaseError) -> None:
        if self._on_error is not None:
            self._on_error(error)
        else:
            log.warning("a connection to %s:%d could not be tunnelled: %s", self.host, self.port, error)

    async def close(self) -> None:
        """Stops listening and cuts the open connections."""
        if self._server is not None:
            self._server.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def __aenter__(self) -> AsyncLocalTunnel:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
