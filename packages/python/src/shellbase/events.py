"""The tenant's events (`GET /v1/events`, as a page or a Server-Sent Events stream) and its webhooks (`/v1/webhooks`)."""

from __future__ import annotations

import http.client
import json
from typing import Iterator, Sequence

from ._http import QueryValue, Response, Transport
from ._wire import from_wire, to_wire
from .context import quote
from .errors import ShellbaseConnectionError, ShellbaseError, error_from_body
from .types import Delivery, Event, EventKind, Webhook, WebhookCreated

#: Seconds between the comment lines the server writes into a quiet stream; a stream's reads wait at
#: least three of them, whatever the client's `timeout`.
KEEPALIVE_S = 15.0


def events_query(kinds: Sequence[EventKind] | str | None, context: str | None, machine: str | None, after: str | None) -> dict[str, QueryValue]:
    """The filters as `GET /v1/events` takes them (`kinds` comma-separated; a str is one kind, or several comma-separated)."""
    joined = None if kinds is None else kinds if isinstance(kinds, str) else ",".join(kinds)
    return {"kinds": joined, "context": context, "machine": machine, "after": after}


class EventFeed:
    """The tenant's events as they happen (`sb.events.stream(...)`): iterate it for `Event`s.

    `stream` returns once the server answered; the kept events after `after` (when given) come first. The feed never ends by itself: `close()` (from any thread),
    leaving a `with` block, breaking out of a `for` loop or dropping the last reference closes the
    connection, and iteration then ends. `last_id` is the id of the last event yielded: stream again with
    `after=feed.last_id` to resume after a dropped connection (a `ShellbaseConnectionError`) or after the
    server ended the stream (iteration ends: the server stopped, or the client left 4 MiB unread). An
    `error` frame (the server failed after the stream began) is raised as `UnavailableError`.
    """

    def __init__(self, response: Response, after: str | None) -> None:
        self._response: Response | None = response
        self._closed = False
        self._url = response.url
        #: The id of the last event yielded (at first the `after` the stream was opened with).
        self.last_id: str | None = after

    def __iter__(self) -> Iterator[Event]:
        return self

    def __next__(self) -> Event:
        data: list[str] = []
        kind: str | None = None
        while True:
            line = self._readline()
            if line is None:
                raise StopIteration
            if line == "":
                if not data:
                    kind = None
                    continue
                return self._dispatch(kind, "\n".join(data))
            if line.startswith(":"):  # a comment: the greeting and the keep-alives
                continue
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "data":
                data.append(value)
            elif field == "event":
                kind = value

    def _readline(self) -> str | None:
        """The next line without its end, or None once the stream is over (closed here, or ended by the server)."""
        response = self._response
        if response is None:
            return None
        try:
            raw = response.readline()
        except (ShellbaseError, http.client.HTTPException, ValueError, AttributeError) as e:
            # Closing from another thread can leave the reader with any of these; only a drop is an error.
            self._finish()
            if self._closed:
                return None
            if isinstance(e, ShellbaseError):
                raise
            raise self._dropped() from e
        if not raw.endswith(b"\n"):  # the end of the answer
            self._finish()
            if raw and not self._closed:  # a connection cut mid-line
                raise self._dropped()
            return None
        return raw.decode("utf-8", errors="replace").rstrip("\r\n")

    def _dispatch(self, kind: str | None, data: str) -> Event:
        if kind == "error":
            self.close()
            try:
                parsed = json.loads(data)
            except ValueError:
                parsed = None
            body = parsed if isinstance(parsed, dict) else {"message": data}
            raise error_from_body({
                "code": body.get("code", "unavailable"),
                "message": f"the event stream ended: {body.get('message', data)}",
                "hint": body.get("hint") or f"stream again with after={self.last_id!r} to resume",
                "details": body.get("details"),
            }, 500)
        event = from_wire(Event, json.loads(data))
        self.last_id = event.id
        return event

    def _dropped(self) -> ShellbaseConnectionError:
        return ShellbaseConnectionError(
            f"the event stream from {self._url} broke",
            code="unavailable",
            hint=f"stream again with after={self.last_id!r} to resume after the last event seen",
            details={"url": self._url, "after": self.last_id},
        )

    def _finish(self) -> None:
        response, self._response = self._response, None
        if response is not None:
            response.close()

    def close(self) -> None:
        """Ends the stream; safe to call from another thread while one iterates it (its loop then ends)."""
        self._closed = True
        response, self._response = self._response, None
        if response is not None:
            response.abort()

    @property
    def closed(self) -> bool:
        return self._response is None

    def __enter__(self) -> EventFeed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


class Events:
    """`sb.events`: what happened in the tenant (docs/api.md, Events and webhooks)."""

    def __init__(self, transport: Transport) -> None:
        self._t = transport

    def stream(
        self,
        *,
        kinds: Sequence[EventKind] | None = None,
        context: str | None = None,
        machine: str | None = None,
        after: str | None = None,
    ) -> EventFeed:
        """Each event as it happens, filtered by kind, context and machine (the kept ones after `after` first).

        Returns once the server answered. Reads wait as long as the client's `timeout` (at least 45 s: the
        server writes a keep-alive every 15 s of silence); a client with `timeout=None` waits forever.
        """
        timeout = None if self._t.timeout is None else max(self._t.timeout, 3 * KEEPALIVE_S)
        response = self._t.request("GET", "/v1/events", query=events_query(kinds, context, machine, after),
                                   accept="text/event-stream", timeout=timeout)
        return EventFeed(response, after)

    # Last: a method named `list` shadows the builtin in the class body's annotations after it.
    def list(
        self,
        *,
        kinds: Sequence[EventKind] | None = None,
        context: str | None = None,
        machine: str | None = None,
        after: str | None = None,
    ) -> list[Event]:
        """The kept events after `after` (an event's id), oldest first, at most 1,000."""
        events = self._t.json("GET", "/v1/events", query=events_query(kinds, context, machine, after)).get("events")
        return [from_wire(Event, e) for e in events] if isinstance(events, list) else []


class Webhooks:
    """`sb.webhooks`: URLs the server POSTs the tenant's events to, signed, with their deliveries."""

    def __init__(self, transport: Transport) -> None:
        self._t = transport

    def create(self, url: str, events: Sequence[EventKind], *, name: str | None = None) -> WebhookCreated:
        """Registers `url` for these kinds of event; the answer carries the signing secret, shown only here.

        A URL on a host the tenant's egress policy refuses, or that resolves to loopback, private or this
        host's addresses, raises `InvalidArgumentError` and nothing is stored.
        """
        body = to_wire({"url": url, "events": [events] if isinstance(events, str) else [*events], "name": name})
        return from_wire(WebhookCreated, self._t.json("POST", "/v1/webhooks", json_body=body))

    def get(self, id: str) -> Webhook:
        return from_wire(Webhook, self._t.json("GET", f"/v1/webhooks/{quote(id)}"))

    def delete(self, id: str) -> None:
        """Deletes the webhook and its deliveries."""
        self._t.request("DELETE", f"/v1/webhooks/{quote(id)}").close()

    def deliveries(self, id: str, *, limit: int | None = None) -> list[Delivery]:
        """Its deliveries, newest first (the server's default limit is 100): state, attempts, the receiver's last
        status or why the last attempt failed."""
        deliveries = self._t.json("GET", f"/v1/webhooks/{quote(id)}/deliveries", query={"limit": limit}).get("deliveries")
        return [from_wire(Delivery, d) for d in deliveries] if isinstance(deliveries, list) else []

    # Last: a method named `list` shadows the builtin in the class body's annotations after it.
    def list(self) -> list[Webhook]:
        webhooks = self._t.json("GET", "/v1/webhooks").get("webhooks")
        return [from_wire(Webhook, w) for w in webhooks] if isinstance(webhooks, list) else []
