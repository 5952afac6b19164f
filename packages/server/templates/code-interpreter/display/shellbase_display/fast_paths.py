"""Per-cell work of ipykernel that buys nothing in a sandbox's kernel, taken off a cell's path.

A warm `1+1` is mostly the kernel's fixed work per cell, and these three pieces were about a third
of that work (docs/performance.md, code interpreter). Each keeps the messages the kernel sends:

- A flush of stdout or stderr with nothing written and nothing waiting returns at once. ipykernel
  otherwise hands two tasks to its IOPub thread and waits for both, six times a cell (the shell's
  dispatch, the execute request and the display hook each flush both streams), even when the cell
  printed nothing.
- Incoming headers keep their dates as the strings they arrived as. jupyter_client parses each
  with dateutil (~1 ms a message under TCG) into datetimes the kernel only writes back out.
- Whether `run_cell` takes a cell id is asked once per method, not with `inspect.signature` twice
  a cell.

Each is applied only where the installed versions have what it replaces (Debian 12's ipykernel
6.17 and jupyter_client 7.4 have all three); elsewhere that piece is left as it is.
"""

from __future__ import annotations

from typing import Any, Callable


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
    return applied
