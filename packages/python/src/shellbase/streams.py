"""The NDJSON event stream of a query (or a machine's exec): iterate it; closing it stops the command."""

from __future__ import annotations

import json
from typing import Callable, Generic, Iterator, TypeVar

from ._http import Response
from ._wire import JsonObject, from_wire
from .errors import ShellbaseConnectionError, error_from_body
from .types import ExitEvent, MachineExitEvent, OutputEvent

E = TypeVar("E")
X = TypeVar("X")


class EventStream(Generic[E, X]):
    """Events as the command writes them, then one exit event (kept in `exit`).

    Breaking out of a `for` loop over it, `close()`, leaving a `with` block, or dropping the last
    reference closes the connection, and the server kills the command (its writes commit as usual).
    An `error` event (the server failed after the stream began) is raised as its typed error.
    """

    def __init__(self, response: Response, parse: Callable[[JsonObject], E], exit_type: type[X]) -> None:
        self._response: Response | None = response
        self._parse = parse
        self._exit_type = exit_type
        #: The exit event, once the stream reached it.
        self.exit: X | None = None

    def __iter__(self) -> Iterator[E]:
        return self

    def __next__(self) -> E:
        while True:
            response = self._response
            if response is None:
                raise StopIteration
            try:
                line = response.readline()
            except BaseException:
                self.close()
                raise
            if not line.endswith(b"\n"):  # the end of the answer, or a connection cut mid-event
                self._finish()
                if self.exit is None:
                    raise ShellbaseConnectionError(
                        f"the stream from {response.url} ended before the command's exit event",
                        code="unavailable",
                        hint="the server may have restarted: look at the context's head (or the machine) before running it again",
                        details={"url": response.url},
                    )
                raise StopIteration
            if not line.strip():
                continue
            event = json.loads(line)
            if event.get("type") == "error" and isinstance(event.get("error"), dict):
                self.close()
                raise error_from_body(event["error"], 500)
            parsed = self._parse(event)
            if isinstance(parsed, self._exit_type):
                self.exit = parsed
            return parsed

    def _finish(self) -> None:
        response, self._response = self._response, None
        if response is not None:
            response.close()

    def close(self) -> None:
        """Stops reading; if the command still runs, the server kills it."""
        response, self._response = self._response, None
        if response is not None:
            if self.exit is None:
                response.abort()
            else:
                response.close()

    @property
    def closed(self) -> bool:
        return self._response is None

    def __enter__(self) -> EventStream[E, X]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


def parse_exec_event(event: JsonObject) -> OutputEvent | ExitEvent:
    if event.get("type") == "exit":
        return from_wire(ExitEvent, event)
    return from_wire(OutputEvent, event)


def parse_machine_event(event: JsonObject) -> OutputEvent | MachineExitEvent:
    if event.get("type") == "exit":
        return from_wire(MachineExitEvent, event)
    return from_wire(OutputEvent, event)


ExecStream = EventStream[OutputEvent | ExitEvent, ExitEvent]
MachineExecStream = EventStream[OutputEvent | MachineExitEvent, MachineExitEvent]


def final_event(response: Response, final: str, on_progress: Callable[[JsonObject], None] | None) -> JsonObject:
    """Reads a long operation's NDJSON answer (a pull, an import, a backup): each `progress` line to
    `on_progress`, an `error` line raised as its typed error; returns the `final` line."""
    while True:
        line = response.readline()
        if not line:
            raise RuntimeError(f"the {final} stream ended early")
        if not line.strip():
            continue
        event = json.loads(line)
        if event.get("type") == "error" and isinstance(event.get("error"), dict):
            raise error_from_body(event["error"], 500)
        if event.get("type") == "progress":
            if on_progress:
                on_progress(event)
        elif event.get("type") == final:
            return event
