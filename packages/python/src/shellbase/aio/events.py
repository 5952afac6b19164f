"""Events and webhooks for asyncio: the same calls as `shellbase.Events` and `shellbase.Webhooks`, awaited."""

from __future__ import annotations

from typing import Callable, Sequence

from ..events import EventFeed, Events, Webhooks
from ..types import Delivery, Event, EventKind, Webhook, WebhookCreated
from ._run import LazyStream, run_sync


class AsyncEventFeed(LazyStream[EventFeed, Event]):
    """The tenant's events as they happen, as an async iterator (see `shellbase.EventFeed`).

    The request goes out on `async with` (which returns once the server answered) or on the first
    `__anext__`. `aclose()`, leaving `async with`, breaking out of `async for`,
    dropping the last reference, or cancelling the task that waits for an event closes the connection.
    """

    def __init__(self, opener: Callable[[], EventFeed], after: str | None) -> None:
        super().__init__(opener)
        self._after = after

    @property
    def last_id(self) -> str | None:
        """The id of the last event yielded (at first the `after` the stream was opened with): `after=` resumes there."""
        return self._stream.last_id if self._stream is not None else self._after

    def __aiter__(self) -> AsyncEventFeed:
        return self

    async def aclose(self) -> None:
        """Ends the stream."""
        self._close()

    async def __aenter__(self) -> AsyncEventFeed:
        try:
            await self._open()
        except BaseException:
            self._close()
            raise
        return self


class AsyncEvents:
    """`sb.events` of the asyncio client."""

    def __init__(self, events: Events) -> None:
        self._s = events

    def stream(
        self,
        *,
        kinds: Sequence[EventKind] | None = None,
        context: str | None = None,
        machine: str | None = None,
        after: str | None = None,
    ) -> AsyncEventFeed:
        """`async with sb.events.stream(...) as feed: async for event in feed: ...`"""
        return AsyncEventFeed(lambda: self._s.stream(kinds=kinds, context=context, machine=machine, after=after), after)

    # Last: a method named `list` shadows the builtin in the class body's annotations after it.
    async def list(
        self,
        *,
        kinds: Sequence[EventKind] | None = None,
        context: str | None = None,
        machine: str | None = None,
        after: str | None = None,
    ) -> list[Event]:
        return await run_sync(self._s.list, kinds=kinds, context=context, machine=machine, after=after)


class AsyncWebhooks:
    """`sb.webhooks` of the asyncio client."""

    def __init__(self, webhooks: Webhooks) -> None:
        self._s = webhooks

    async def create(self, url: str, events: Sequence[EventKind], *, name: str | None = None) -> WebhookCreated:
        return await run_sync(self._s.create, url, events, name=name)

    async def get(self, id: str) -> Webhook:
        return await run_sync(self._s.get, id)

    async def delete(self, id: str) -> None:
        await run_sync(self._s.delete, id)

    async def deliveries(self, id: str, *, limit: int | None = None) -> list[Delivery]:
        return await run_sync(self._s.deliveries, id, limit=limit)

    # Last: a method named `list` shadows the builtin in the class body's annotations after it.
    async def list(self) -> list[Webhook]:
        return await run_sync(self._s.list)
