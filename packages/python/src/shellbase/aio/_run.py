"""Running the synchronous client's calls in threads, so that cancelling a task drops its connection."""

from __future__ import annotations

import asyncio
import contextvars
import functools
from typing import Any, Callable, Generic, Iterable, Iterator, ParamSpec, Protocol, TypeVar

from .._http import CancelScope, Response, current_scope
from ..streams import EventStream

P = ParamSpec("P")
R = TypeVar("R")
E = TypeVar("E")
X = TypeVar("X")


async def run_sync(fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
    """Runs `fn` in the loop's default executor; if the awaiting task is cancelled, its connections close
    at once (the server sees the client go away and stops a query), and CancelledError propagates."""
    scope = CancelScope()
    ctx = contextvars.copy_context()
    ctx.run(current_scope.set, scope)
    loop = asyncio.get_running_loop()
    future = loop.run_in_executor(None, functools.partial(ctx.run, fn, *args, **kwargs))
    try:
        return await future
    except asyncio.CancelledError:
        scope.cancel()
        raise


class AsyncResponse:
    """An answer whose body has not been read yet (the async form of `shellbase.Response`)."""

    def __init__(self, response: Response) -> None:
        self._response = response
        self.status = response.status
        self.headers = response.headers

    async def read(self, size: int = -1) -> bytes:
        return await run_sync(self._response.read, size)

    async def json(self) -> object:
        return await run_sync(self._response.json)

    async def text(self) -> str:
        return await run_sync(self._response.text)

    async def aclose(self) -> None:
        self._response.close()

    def abort(self) -> None:
        self._response.abort()

    async def __aenter__(self) -> AsyncResponse:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._response.close()


class _Closable(Protocol[E]):
    def __iter__(self) -> Iterator[E]: ...

    def close(self) -> None: ...


S = TypeVar("S", bound=_Closable[Any])


def _next(stream: Iterable[E]) -> E | None:
    # StopIteration cannot cross a Future: the end is None (events never are).
    for event in stream:
        return event
    return None


class LazyStream(Generic[S, E]):
    """A synchronous stream of events opened by `opener` on first use (in a thread) and read one event
    at a time in threads. Breaking out of `async for`, `aclose()`, leaving `async with`, dropping the
    last reference, or cancelling the task that waits for an event closes it."""

    def __init__(self, opener: Callable[[], S]) -> None:
        self._opener: Callable[[], S] | None = opener
        self._stream: S | None = None
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    async def _open(self) -> S:
        if self._stream is None:
            assert self._opener is not None
            opener, self._opener = self._opener, None
            self._stream = await run_sync(opener)
            if self._closed:  # closed while it opened
                self._stream.close()
        return self._stream

    async def __anext__(self) -> E:
        if self._closed:
            raise StopAsyncIteration
        try:
            event = await run_sync(_next, await self._open())
        except BaseException:
            self._close()
            raise
        if event is None:
            self._closed = True
            raise StopAsyncIteration
        return event

    def _close(self) -> None:
        self._closed = True
        self._opener = None
        if self._stream is not None:
            self._stream.close()

    async def __aexit__(self, *exc: object) -> None:
        self._close()

    def __del__(self) -> None:
        self._close()


class AsyncEventStream(LazyStream[EventStream[E, X], E], Generic[E, X]):
    """Events as the command writes them, then one exit event (kept in `exit`); the request goes out on
    the first `__anext__`. Breaking out of `async for`, `aclose()`, leaving `async with`, dropping the
    last reference, or cancelling the task that waits for an event closes the connection, and the
    server kills the command."""

    @property
    def exit(self) -> X | None:
        """The exit event, once the stream reached it."""
        return self._stream.exit if self._stream is not None else None

    def __aiter__(self) -> AsyncEventStream[E, X]:
        return self

    async def aclose(self) -> None:
        """Stops reading; if the command still runs, the server kills it."""
        self._close()

    async def __aenter__(self) -> AsyncEventStream[E, X]:
        return self
