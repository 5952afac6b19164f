"""What the tests share: the server under test (SHELLBASE_URL, SHELLBASE_API_KEY), unique names, polling."""

from __future__ import annotations

import os
import socket
import time
import uuid
from typing import Callable, TypeVar

from shellbase import ContextHandle, NotFoundError, Shellbase, UsageItem

T = TypeVar("T")

URL = os.environ.get("SHELLBASE_URL", "")
KEY = os.environ.get("SHELLBASE_API_KEY", "")
if not URL or not KEY:
    raise RuntimeError("these tests run against a real server: set SHELLBASE_URL and SHELLBASE_API_KEY (an admin key)")


def client(*, timeout: float | None = 120.0) -> Shellbase:
    return Shellbase(URL, KEY, timeout=timeout)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def wait_for(what: str, check: Callable[[], T | None], *, timeout: float = 30.0, interval: float = 0.2) -> T:
    """Polls `check` until it returns something truthy; fails naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def query_usage(sb: Shellbase, context: str) -> UsageItem | None:
    """The usage ledger's row for a context (written when a query ends), if any."""
    for item in sb.usage(group_by="context").items:
        if item.key == context and item.queries > 0:
            return item
    return None


def closed_port() -> int:
    """A loopback port nothing listens on (it was free a moment ago)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def drop(handle: ContextHandle) -> None:
    """Deletes a context a test made, if it exists."""
    try:
        handle.delete()
    except NotFoundError:
        pass
