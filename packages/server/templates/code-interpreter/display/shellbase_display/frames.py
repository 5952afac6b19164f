"""`e2b/data`: a pandas DataFrame as `{column: [values]}`.

Keys are the column names as strings (a MultiIndex column is its tuple's str()); each list holds
the column's values top to bottom, made JSON-safe by `values.json_value`. The index is not
included. When two columns share a name, the later one wins.
"""

from __future__ import annotations

from typing import Any

from .values import Json, json_value


def data_of(frame: Any) -> dict[str, list[Json]]:
    """The `e2b/data` value of a DataFrame."""
    data: dict[str, list[Json]] = {}
    for name, column in frame.items():
        # Series.tolist() turns numpy scalars into Python ones, datetime64 into Timestamps.
        data[name if isinstance(name, str) else str(name)] = [json_value(v) for v in column.tolist()]
    return data
