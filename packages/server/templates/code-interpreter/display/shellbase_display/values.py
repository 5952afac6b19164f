"""Plain JSON values from whatever a DataFrame cell or a plotted coordinate holds.

The result is built from dict, list, str, int, float, bool and None only, and every float is
finite: NaN, NaT, pandas.NA and infinities become None (JSON has no spelling for them), numpy
scalars become their Python equals, dates and times become ISO 8601 strings. Anything else is
described by its str().
"""

from __future__ import annotations

import datetime
import decimal
import math
from typing import Any, Union

Json = Union[None, bool, int, float, str, list, dict]


def json_value(value: Any) -> Json:
    """`value` as a JSON-safe Python value (see the module's doc)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else None
    if _is_missing(value):
        return None
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return _duration(value)
    if isinstance(value, decimal.Decimal):
        return json_value(float(value))
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", errors="replace")
    if isinstance(value, dict):
        return {str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [json_value(v) for v in value]
    numpy_value = _from_numpy(value)
    if numpy_value is not _NOT_NUMPY:
        return numpy_value
    return str(value)


_NOT_NUMPY = object()


def _from_numpy(value: Any) -> Any:
    """A numpy scalar or array as JSON, or _NOT_NUMPY for anything else (numpy is not imported)."""
    if type(value).__module__ != "numpy":
        return _NOT_NUMPY
    import numpy

    if isinstance(value, numpy.datetime64):
        if numpy.isnat(value):
            return None
        # Nanosecond and finer units do not fit datetime.datetime; microseconds do.
        return json_value(value.astype("datetime64[us]").item())
    if isinstance(value, numpy.timedelta64):
        if numpy.isnat(value):
            return None
        return json_value(value.astype("timedelta64[us]").item())
    if isinstance(value, numpy.ndarray):
        return [json_value(v) for v in value.tolist()]
    if isinstance(value, numpy.generic):
        return json_value(value.item())
    return _NOT_NUMPY


def _is_missing(value: Any) -> bool:
    """True for pandas' NaT and NA (checked by type name, so pandas is never imported here)."""
    name = type(value).__name__
    return type(value).__module__.startswith("pandas") and name in ("NaTType", "NAType")


def _duration(value: datetime.timedelta) -> str:
    """An ISO 8601 duration with days, hours, minutes and (fractional) seconds: P1DT2H3M4.5S."""
    total = value.total_seconds()
    sign = "-" if total < 0 else ""
    rest = abs(value)
    hours, seconds = divmod(rest.seconds, 3600)
    minutes, seconds = divmod(seconds, 60)
    fraction = f".{rest.microseconds:06d}".rstrip("0") if rest.microseconds else ""
    return f"{sign}P{rest.days}DT{hours}H{minutes}M{seconds}{fraction}S"


def finite_number(value: Any) -> float | None:
    """A plotted coordinate as a Python float, None if it is missing or not finite."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None
