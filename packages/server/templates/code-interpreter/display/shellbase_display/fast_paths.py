"""Per-cell work of ipykernel that buys nothing in a sandbox's kernel, taken off a cell's path.

A warm `1+1` is mostly the kernel's fixed work per cell (docs/performance.md, code interpreter).
Each of these pieces keeps the messages the kernel sends and what it logs:

- A flush of stdout or stderr with nothing written and nothing waiting returns at once. ipykernel
  otherwise hands two tasks to its IOPub thread and waits for both, six times a cell (the shell's
  dispatch, the execute request and the display hook each flush both streams), even when the cell
  printed nothing.
- Incoming headers keep their dates as the strings they arrived as. jupyter_client parses each
  with dateutil (~1 ms a message under TCG) into datetimes the kernel only writes back out.
- Whether `run_cell` takes a cell id is asked once per method, not with `inspect.signature` twice
  a cell.
- IPython's formatters (fourteen calls to format one result) reach their error handling
  (`catch_format_error`) directly, not through the `decorator` package's wrapper, which binds
  every call's arguments to the method's signature first.
- The kernel's logger, which passes nothing below its handlers' level on, makes no records below
  it: ipykernel logs a few debug lines a message, each made into a record and then dropped.

Each is applied only where the installed versions have what it replaces (Debian 12's ipykernel
6.17, jupyter_client 7.4, IPython 8.5 and decorator 5.1 have all five); elsewhere that piece is
left as it is.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any, Callable, Iterator


def _quick_flush(flush: Callable[[Any], None]) -> Callable[[Any], None]:
    def flush_if_needed(stream: Any) -> None:
        # A write from any thread sets `_flush_pending` (and schedules its own flush) before this
        # check can miss it; the buffer's position is what was written since the last flush.
        if not stream._flush_pending and not getattr(stream, "_subprocess_flush_pending", False) and stream._buffer.tell() == 0:
            return
        flush(stream)

    return flush_if_needed


def _cached(accepts: Callable[[Any], bool]) -> Callable[[Any], bool]:
    known: dict[Any, bool] = {}

    def accepts_cell_id(meth: Any) -> bool:
        key = getattr(meth, "__func__", meth)
        if key not in known:
            known[key] = bool(accepts(meth))
        return known[key]

    return accepts_cell_id


def _direct(handle: Callable[..., Any], method: Callable[..., Any], wrapped: Callable[..., Any]) -> Callable[..., Any]:
    def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not args:  # the object by keyword: the wrapper's binding makes it positional, as `handle` wants
            return wrapped(self, *args, **kwargs)
        return handle(method, self, *args, **kwargs)

    __call__.__doc__, __call__.__wrapped__ = method.__doc__, method  # type: ignore[attr-defined]
    __call__._shellbase = True  # type: ignore[attr-defined]
    return __call__


def _subclasses(cls: type) -> Iterator[type]:
    yield cls
    for sub in cls.__subclasses__():
        yield from _subclasses(sub)


def _direct_formatters() -> bool:
    """Every formatter class whose `__call__` is `catch_format_error`'s wrapper calls it directly."""
    try:
        from IPython.core import formatters
    except ImportError:
        return False
    handle = getattr(formatters.catch_format_error, "__wrapped__", None)
    if handle is None:
        return False
    done = False
    for cls in _subclasses(formatters.BaseFormatter):
        wrapped = cls.__dict__.get("__call__")
        method = getattr(wrapped, "__wrapped__", None)
        if method is None or getattr(wrapped, "_shellbase", False):
            continue
        try:
            if inspect.getclosurevars(wrapped).nonlocals.get("caller") is not handle:
                continue
        except TypeError:
            continue
        cls.__call__ = _direct(handle, method, wrapped)
        done = True
    return done


def _quiet_log(log: logging.Logger) -> bool:
    """Raises a logger that hands records to its own handlers only to their lowest level."""
    if log.propagate or not log.handlers:
        return False
    lowest = min(h.level for h in log.handlers)
    if log.level >= lowest:
        return False
    log.setLevel(lowest)
    return True


def install() -> list[str]:
    """Applies each piece this kernel's libraries allow, once; returns the names of those applied."""
    applied = []
    try:
        from ipykernel import iostream
    except ImportError:
        return applied
    stream = iostream.OutStream
    if all(hasattr(stream, a) for a in ("flush", "_flush")) and not getattr(stream.flush, "_shellbase", False):
        stream.flush = _quick_flush(stream.flush)
        stream.flush._shellbase = True
        applied.append("flush")
    try:
        from jupyter_client import session
        if hasattr(session, "extract_dates") and not getattr(session.extract_dates, "_shellbase", False):
            keep = lambda obj: obj  # noqa: E731
            keep._shellbase = True
            session.extract_dates = keep
            applied.append("dates")
    except ImportError:
        pass
    try:
        from ipykernel import ipkernel
        if hasattr(ipkernel, "_accepts_cell_id") and not getattr(ipkernel._accepts_cell_id, "_shellbase", False):
            ipkernel._accepts_cell_id = _cached(ipkernel._accepts_cell_id)
            ipkernel._accepts_cell_id._shellbase = True
            applied.append("cell_id")
    except ImportError:
        pass
    if _direct_formatters():
        applied.append("formatters")
    try:
        from IPython import get_ipython
        kernel = getattr(get_ipython(), "kernel", None)
        if kernel is not None and isinstance(getattr(kernel, "log", None), logging.Logger) and _quiet_log(kernel.log):
            applied.append("log")
    except ImportError:
        pass
    return applied
