"""One axis (x or y) of a matplotlib Axes as a chart sees it.

Coordinates are read from artists in matplotlib's own numbers (data coordinates after unit
conversion) and turned back into what the user plotted: a date axis gives ISO 8601 strings, a
categorical axis (strings plotted) gives the category names, any other axis gives floats. The
scale is matplotlib's scale name, or 'datetime' / 'categorical' for those two kinds of axis.
"""

from __future__ import annotations

import datetime
import math
import re
from typing import Any, Callable, Optional, Sequence, Union

import numpy as np

Coordinate = Union[float, str]
# Reads finite numbers back, all at once: a name for each, or None where a number has none (a
# categorical axis between categories: a jittered point keeps its number).
Decoder = Callable[[np.ndarray], Sequence[Optional[str]]]

# A unit is the last parenthesised or bracketed part of a label that starts a word:
# "Time (s)" -> "s", "Distance [km]" -> "km"; "f(x)" has none.
_UNIT = re.compile(r"(?:^|\s)[(\[]\s*([^()\[\]]+?)\s*[)\]]")


def unit_of(label: Optional[str]) -> Optional[str]:
    """The unit a label names, e.g. 's' for 'Time (s)', or None."""
    if not label:
        return None
    found = _UNIT.findall(label)
    return found[-1] if found else None


class AxisView:
    """An Axes' x or y axis: its label, unit, scale, ticks, and how to read its coordinates."""

    def __init__(self, ax: Any, which: str) -> None:
        self.which = which
        self.axis = ax.xaxis if which == "x" else ax.yaxis
        label = ax.get_xlabel() if which == "x" else ax.get_ylabel()
        self.label: Optional[str] = label or None
        self.unit = unit_of(self.label)
        self._decode, kind = _decoder(self.axis)
        self.scale: str = kind or (ax.get_xscale() if which == "x" else ax.get_yscale())

    def coordinates(self, values: Any) -> list[Optional[Coordinate]]:
        """Data coordinates as the user sees them; None where one is missing or cannot be read."""
        numbers = np.asarray(values, dtype=float).reshape(-1)
        plain: list[Optional[Coordinate]] = [v if math.isfinite(v) else None for v in numbers.tolist()]
        if self._decode is None:
            return plain
        where = np.flatnonzero(np.isfinite(numbers))
        for i, name in zip(where.tolist(), self._names(numbers[where])):
            if name is _UNREADABLE:
                plain[i] = None
            elif name is not None:  # else the number stands
                plain[i] = name
        return plain

    def coordinate(self, value: Any) -> Optional[Coordinate]:
        """One coordinate, as coordinates() reads it."""
        return self.coordinates([value])[0]

    def _names(self, numbers: np.ndarray) -> Sequence[Any]:
        """The decoder's names for finite numbers; _UNREADABLE for each it cannot read."""
        assert self._decode is not None
        try:
            return self._decode(numbers)
        except (ValueError, OverflowError, TypeError, KeyError):
            return [self._name(v) for v in numbers]  # find the ones that cannot be read

    def _name(self, number: float) -> Any:
        assert self._decode is not None
        try:
            return self._decode(np.array([number]))[0]
        except (ValueError, OverflowError, TypeError, KeyError):
            return _UNREADABLE

    def ticks(self) -> tuple[list[Coordinate], list[str]]:
        """The major ticks inside the view: their positions (as coordinates) and their labels."""
        locs = [float(v) for v in self.axis.get_majorticklocs()]
        labels = self._tick_labels(locs) or [f"{v:g}" for v in locs]
        low, high = sorted(float(v) for v in self.axis.get_view_interval())
        slack = (high - low) * 1e-9
        shown = [(loc, text) for loc, text in zip(locs, labels) if low - slack <= loc <= high + slack]
        positions: list[Coordinate] = []
        texts: list[str] = []
        for (_, text), position in zip(shown, self.coordinates([loc for loc, _ in shown])):
            if position is not None:
                # Tick locators step in floats (0.1 * 12 = 1.2000000000000002); 15 digits undo that.
                positions.append(float(f"{position:.15g}") if isinstance(position, float) else position)
                texts.append(text)
        return positions, texts

    def name_at(self, low: float, high: Optional[float] = None) -> str:
        """What the axis calls the place a bar or box occupies, from `low` to `high` (or the
        point `low`): the category or date at its centre; else, when the ticks were placed by
        hand (pandas' bar plots, boxplot, set_xticks) or name categories, the label of the tick
        inside it nearest the centre (grouped bars sit beside their tick); else the centre."""
        high = low if high is None else high
        low, high = min(low, high), max(low, high)
        center = (low + high) / 2
        named = self.coordinate(center)
        if isinstance(named, str):
            return named
        import matplotlib.ticker as mticker

        if isinstance(self.axis.get_major_locator(), mticker.FixedLocator) or self.scale == "categorical":
            locs = [float(v) for v in self.axis.get_majorticklocs()]
            slack = max(high - low, abs(center), 1.0) * 1e-9
            inside = [(abs(loc - center), text) for loc, text in zip(locs, self._tick_labels(locs))
                      if low - slack <= loc <= high + slack and text]
            if inside:
                return min(inside, key=lambda pair: pair[0])[1]
        return f"{center:g}"

    def _tick_labels(self, locs: list[float]) -> list[str]:
        try:
            return [str(t) for t in self.axis.get_major_formatter().format_ticks(locs)]
        except Exception:  # a formatter that cannot format its own ticks: no labels
            return []

    def fields(self) -> dict[str, Any]:
        """The chart fields that describe this axis, keyed x_* or y_*."""
        w = self.which
        positions, labels = self.ticks()
        return {f"{w}_label": self.label, f"{w}_unit": self.unit, f"{w}_scale": self.scale,
                f"{w}_ticks": positions, f"{w}_tick_labels": labels}


_UNREADABLE = object()


def _decoder(axis: Any) -> tuple[Optional[Decoder], Optional[str]]:
    """How to read an axis' numbers back (None for plain numbers) and the kind of axis."""
    import matplotlib.category as mcategory
    import matplotlib.dates as mdates

    locator, formatter = axis.get_major_locator(), axis.get_major_formatter()
    periods = _pandas_period_decoder(locator, formatter)
    if periods is not None:
        return periods, "datetime"
    date_formatters = (mdates.DateFormatter, mdates.AutoDateFormatter, mdates.ConciseDateFormatter)
    if isinstance(locator, mdates.DateLocator) or isinstance(formatter, date_formatters):
        zone = axis.get_units()
        if isinstance(zone, datetime.tzinfo):
            return (lambda a: [d.isoformat() for d in mdates.num2date(a, tz=zone)]), "datetime"
        # Naive dates are plotted as UTC; they come back naive.
        utc = datetime.timezone.utc
        return (lambda a: [d.replace(tzinfo=None).isoformat() for d in mdates.num2date(a, tz=utc)]), "datetime"
    if isinstance(axis.converter, mcategory.StrCategoryConverter):
        # UnitData keeps the category -> position map; position i is the i-th category plotted.
        mapping = getattr(axis.get_units(), "_mapping", None) or {}
        names = {int(position): str(name) for name, position in mapping.items()}
        return (lambda a: [names.get(int(v)) if v.is_integer() else None for v in a.tolist()]), "categorical"
    return None, None


def _pandas_period_decoder(locator: Any, formatter: Any) -> Optional[Decoder]:
    """pandas plots a DatetimeIndex as period ordinals with its own locator and formatter, both
    carrying the frequency; an ordinal is read back as the start of its period."""
    for part in (formatter, locator):
        freq = getattr(part, "freq", None)
        if freq is not None and type(part).__module__.startswith("pandas."):
            import pandas

            def starts(a: np.ndarray) -> list[str]:
                ordinals = np.rint(a).astype("int64")
                from_ordinals = getattr(pandas.PeriodIndex, "from_ordinals", None)  # pandas >= 2.2
                periods = (from_ordinals(ordinals, freq=freq) if from_ordinals is not None
                           else pandas.PeriodIndex(ordinal=ordinals, freq=freq))
                return [t.isoformat() for t in periods.to_timestamp()]

            return starts
    return None
