"""Structured results for E2B's code interpreter protocol, computed inside an IPython kernel.

`register(get_ipython())` makes displayed matplotlib Figures carry `e2b/chart` (`chart_of`: the
figure as a chart, see charts.py) and pandas DataFrames carry `e2b/data` (`data_of`: the frame as
`{column: [values]}`, see frames.py). Both values are plain JSON. matplotlib, pandas and numpy
are imported only when a figure or frame is described, so a kernel without them still registers
what it can.
"""

from __future__ import annotations

from typing import Any


def register(ip: Any) -> list[str]:
    """See ipython.register."""
    from .ipython import register as _register

    return _register(ip)


def chart_of(figure: Any) -> dict:
    """See charts.chart_of."""
    from .charts import chart_of as _chart_of

    return _chart_of(figure)


def data_of(frame: Any) -> dict:
    """See frames.data_of."""
    from .frames import data_of as _data_of

    return _data_of(frame)


__all__ = ["register", "chart_of", "data_of"]
