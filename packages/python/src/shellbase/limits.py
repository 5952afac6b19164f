"""The limit that ended a command, and how to give it more (the same words as the TypeScript SDK's `limitMessage`).

`LimitHit` itself is a wire type (`shellbase.LimitHit`, generated into _wire_types.py); its methods are here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._wire_types import LimitHit

#: The most any tenant's `timeout_ms` may be (24 h). A tenant's own maximum (1 h unless the admin set
#: its `quotas.timeoutMs`) is at most this; it holds for queries, machine exec, services' start and E2B commands.
TIMEOUT_CEILING_MS = 86_400_000


def format_duration(ms: float) -> str:
    """`ms` in the largest units that fit: 3600000 is `1h`, 5400000 `1h30m`, 500 `500ms`."""
    if ms < 1000:
        return f"{ms}ms"
    h, rest = divmod(ms, 3_600_000)
    m, rest = divmod(rest, 60_000)
    s = round(rest / 1000, 3)
    return (f"{h}h" if h else "") + (f"{m}m" if m else "") + (f"{s:g}s" if s else "")


class LimitHitMethods:
    """A LimitHit's explanation: the limit that ended the command (its time limit, `timeout_ms`), its value for this
    run, and the most the tenant may ask for (`value` and `max`)."""

    def message(self, option: str = "timeout_ms") -> str:
        """Which limit ended the command, its value, and how to give it longer (`option` up to the tenant's maximum)."""
        ran = f"the command timed out after {format_duration(self.value)} (timeoutMs = {self.value})"
        if self.value < self.max:
            return f"{ran}; pass {option} up to {format_duration(self.max)} ({self.max} ms, this tenant's maximum) to give it longer"
        if self.max < TIMEOUT_CEILING_MS:
            return (f"{ran}, this tenant's maximum; an admin may raise the tenant's quotas.timeoutMs up to "
                    f"{format_duration(TIMEOUT_CEILING_MS)} ({TIMEOUT_CEILING_MS} ms)")
        return f"{ran}, the most any tenant may ask for"

    def __str__(self) -> str:
        return self.message()


def timeout_message(timed_out: bool, limit: LimitHit | None, option: str = "timeout_ms") -> str | None:
    """A timed-out command's explanation (None when it did not time out)."""
    if not timed_out:
        return None
    return limit.message(option) if limit else f"the command timed out; pass {option} to give it longer"
