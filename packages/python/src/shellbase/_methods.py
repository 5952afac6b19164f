"""What the generated wire classes do besides holding fields: _wire_types.py's LimitHit, ExecExit and MachineExit
derive from these (scripts/openapi-python.mjs names which class derives from which). LimitHit's is limits.py's."""

from __future__ import annotations

from .limits import LimitHitMethods, timeout_message

__all__ = ["ExecExitMethods", "LimitHitMethods", "MachineExitMethods"]

# The classes here declare no fields: typing.get_type_hints, which from_wire reads, would evaluate theirs too.


class ExecExitMethods:
    """A query's ending (`exit_code`, `conflict`, `timed_out`, `limit`): whether it went well, and why it timed out."""

    @property
    def ok(self) -> bool:
        """Exit code 0 and no conflict."""
        return self.exit_code == 0 and self.conflict is None

    @property
    def timeout_message(self) -> str | None:
        """With `timed_out`: which limit ended it, its value, and how far `timeout_ms` may go for this tenant."""
        return timeout_message(self.timed_out, self.limit)


class MachineExitMethods:
    """A machine exec's ending (`exit_code`, `timed_out`, `limit`): whether it went well, and why it timed out."""

    @property
    def ok(self) -> bool:
        """Exit code 0."""
        return self.exit_code == 0

    @property
    def timeout_message(self) -> str | None:
        """With `timed_out`: which limit ended it, its value, and how far `timeout_ms` may go for this tenant."""
        return timeout_message(self.timed_out, self.limit)
