"""Display formatters that add `e2b/chart` to matplotlib Figures and `e2b/data` to DataFrames.

Each is an IPython formatter of its own MIME type, so `display()`, a cell's value and the inline
backend's figures (which it shows with `display()`) all carry it next to the usual text/plain,
image/png or text/html. The formatters recognise their class by module and name along the
object's MRO, so registering imports neither matplotlib nor pandas. They keep no per-type table
for that class either: the inline backend clears Figure from every formatter's table each time it
is configured, and these would otherwise be cleared with it. A formatter never raises; an object
it cannot describe gets no entry (or, for a figure, an `unknown` chart).
"""

from __future__ import annotations

import importlib.util
from typing import Any, Callable, Optional

from IPython.core.formatters import BaseFormatter
from traitlets import ObjectName, Unicode

CHART_MIME = "e2b/chart"
DATA_MIME = "e2b/data"


class _ClassFormatter(BaseFormatter):
    """Describes instances of one class, named by its module and class name.

    Other objects go through BaseFormatter's usual lookup, so printers registered for this MIME
    type with for_type() still work.
    """

    _return_type = (dict,)

    def __init__(self, module: str, name: str, describe: Callable[[Any], Optional[dict]], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._class = (module, name)
        self._describe = describe

    def __call__(self, obj: Any) -> Optional[dict]:
        if not self.enabled:
            return None
        try:
            if any((getattr(c, "__module__", None), c.__name__) == self._class for c in type(obj).__mro__):
                return self._describe(obj)
            return super().__call__(obj)
        except Exception:  # a failed description must not reach the user's cell
            return None


class ChartFormatter(_ClassFormatter):
    format_type = Unicode(CHART_MIME)
    print_method = ObjectName("_repr_e2b_chart_")


class DataFormatter(_ClassFormatter):
    format_type = Unicode(DATA_MIME)
    print_method = ObjectName("_repr_e2b_data_")


def _chart(figure: Any) -> dict:
    from .charts import chart_of  # imports numpy, which matplotlib brings

    return chart_of(figure)


def _data(frame: Any) -> dict:
    from .frames import data_of

    return data_of(frame)


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def register(ip: Any) -> list[str]:
    """Add the formatters to an InteractiveShell, each only if its library is importable; calling
    it again replaces them. Returns the MIME types registered."""
    formatters = ip.display_formatter.formatters
    added = []
    for mime, library, module, name, describe, kind in (
        (CHART_MIME, "matplotlib", "matplotlib.figure", "Figure", _chart, ChartFormatter),
        (DATA_MIME, "pandas", "pandas.core.frame", "DataFrame", _data, DataFormatter),
    ):
        formatters.pop(mime, None)
        if _importable(library):
            formatters[mime] = kind(module, name, describe, parent=ip.display_formatter)
            added.append(mime)
    return added
