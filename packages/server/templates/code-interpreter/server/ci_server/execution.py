"""One execution: wait for the context, run the cell, stream its lines to the client.

The kernel runs the cell on a worker thread (one kept from an earlier execution when one is idle:
starting a thread takes ~0.8 ms in a guest under TCG) and its lines go through a queue; the caller's thread
writes them out, adds a `keepalive` after KEEPALIVE seconds of silence (also while waiting for the
context), forwards at most one `error`, and ends with `end_of_execution`. If the client goes away
(the connection closes, a write fails), the kernel is interrupted so the context is free for the
next execution; a cell that ignores the interrupt for GRACE seconds has its kernel killed, and the
next execution starts a fresh one.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Callable, Protocol

from . import results
from .contexts import Context
from .errors import KernelError

log = logging.getLogger(__name__)

KEEPALIVE = 5.0   # seconds of silence before a keepalive line
GRACE = 10.0      # seconds an interrupted cell has to stop before its kernel is killed
TICK = 0.25       # how often the client's connection is checked


IDLE_WORKERS = 4  # worker threads kept waiting for the next execution


class _Workers:
    """Threads that run one task at a time; up to `idle_max` of them wait for the next task."""

    def __init__(self, idle_max: int) -> None:
        self._lock = threading.Lock()
        self._idle: list[queue.SimpleQueue] = []
        self._idle_max = idle_max

    def run(self, task: Callable[[], None]) -> None:
        with self._lock:
            inbox = self._idle.pop() if self._idle else None
        if inbox is None:
            inbox = queue.SimpleQueue()
            threading.Thread(target=self._serve, args=(inbox,), name="execute", daemon=True).start()
        inbox.put(task)

    def _serve(self, inbox: queue.SimpleQueue) -> None:
        while True:
            task = inbox.get()
            try:
                task()
            except Exception:  # a task reports its own failures; this thread carries on regardless
                log.exception("an execution's worker task failed")
            with self._lock:
                if len(self._idle) >= self._idle_max:
                    return
                self._idle.append(inbox)


_workers = _Workers(IDLE_WORKERS)


class Sink(Protocol):
    """The client's end of the stream."""

    def send(self, event: results.Event) -> bool:
        """Write one line (or hold it, to go with the next); False if the client is gone."""

    def flush(self) -> bool:
        """Write what is held; False if the client is gone."""

    def gone(self) -> bool:
        """Whether the client has closed its connection."""


class _Writer:
    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self.connected = True
        self.last = time.monotonic()
        self.errored = False

    def send(self, event: results.Event) -> None:
        if not self.connected:
            return
        if event["type"] == "error":
            if self.errored:
                return
            self.errored = True
        self.connected = self.sink.send(event)
        self.last = time.monotonic()

    def tick(self) -> None:
        """Write what the sink holds; notice a closed connection; keep a silent one alive."""
        if self.connected:
            self.connected = self.sink.flush()
        if self.connected and self.sink.gone():
            self.connected = False
        elif self.connected and time.monotonic() - self.last >= KEEPALIVE:
            self.send(results.KEEPALIVE)


_DONE = object()


def run(ctx: Context, code: str, env_vars: dict[str, str], sink: Sink) -> bool:
    """Run `code` in `ctx` with `env_vars` set for it, streaming to `sink`. True if the stream ended cleanly."""
    out = _Writer(sink)
    while not ctx.lock.acquire(timeout=TICK):
        out.tick()
        if not out.connected:
            return False
    try:
        if not out.connected or sink.gone():
            return False
        try:
            kernel = ctx.ensure_started()
        except KernelError as e:
            out.send(results.error("KernelError", str(e), f"the {ctx.language} kernel is not running: {e}"))
            out.send(results.END)
            return out.connected
        env = ctx.env_change(env_vars)
        lines: queue.Queue = queue.Queue()

        def work() -> None:
            try:
                kernel.execute(code, env, lines.put)
            except Exception as e:  # a bug of ours or a broken kernel: the client hears of it
                log.exception("execution failed in context %s", ctx.id)
                lines.put(results.error("InternalError", str(e), repr(e)))
            finally:
                lines.put(_DONE)

        _workers.run(work)
        interrupted_at = last_interrupt = 0.0
        killed = False
        while True:
            try:
                event = lines.get(timeout=TICK)
            except queue.Empty:
                out.tick()
            else:
                if event is _DONE:
                    break
                out.send(event)
            if not out.connected:
                now = time.monotonic()
                if not interrupted_at:
                    interrupted_at = last_interrupt = now
                    kernel.interrupt()
                elif now - last_interrupt >= 1.0 and not killed:
                    last_interrupt = now  # again: the first may have come before the cell began
                    kernel.interrupt()
                if not killed and now - interrupted_at > GRACE:
                    log.warning("context %s: the cell ignored an interrupt; killing its kernel", ctx.id)
                    killed = True
                    kernel.kill()
        out.send(results.END)
        return out.connected
    finally:
        ctx.lock.release()
