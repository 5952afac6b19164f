"""`e2b/chart`: a matplotlib Figure described as data, in the shape @e2b/code-interpreter reads.

Every chart has `type`, `title` (None when there is none) and `elements`. The kinds:

  line, scatter      x_* and y_* fields (below); elements {label, points: [[x, y], ...]}, one per
                     Line2D (line) or per scatter PathCollection (scatter). An Axes with both is a
                     scatter chart holding all of them: drawing a fitted line as dots misleads
                     less than joining scattered dots with lines.
  bar                x_* and y_*; elements {label, group, value}, one per bar of every
                     BarContainer: label names the bar's place (category, date, tick label, or the
                     number), group is the container's label (the series), value its length.
  box_and_whisker    x_* and y_*; elements {label, min, first_quartile, median, third_quartile,
                     max, outliers}, one per box (see boxes.py).
  pie                elements {label, angle (degrees), radius}, one per Wedge.
  superchart         a Figure with several Axes that have content: elements are their charts, the
                     title is the figure's suptitle (which also titles a lone untitled chart).
  unknown            anything else (images, polar or 3D Axes, ...): elements is empty.

The x_* and y_* fields are label, unit (from a label like "Time (s)"), scale ('linear', 'log',
..., 'datetime', 'categorical'), ticks (the major ticks in view, as coordinates) and tick_labels.
Coordinates are floats, ISO 8601 strings on a date axis, category names on a categorical axis.
Labels are matplotlib's own: one that starts with "_" is its placeholder for an unlabelled artist.
Lines and collections drawn in other coordinates than the data's (axhline, axvline) are left out,
and so are points with a coordinate missing. The result holds dicts, lists, str, finite floats and
None only, so it is JSON as it stands.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from .axis import AxisView
from .boxes import find_boxes
from .values import finite_number


def chart_of(figure: Any) -> dict[str, Any]:
    """The `e2b/chart` value of a Figure. Never raises: what it cannot describe is `unknown`."""
    try:
        suptitle = _suptitle(figure)
        charts = [c for c in (_axes_chart(ax) for ax in figure.get_axes() if _shown(ax)) if c is not None]
        if len(charts) == 1:
            chart = charts[0]
            chart["title"] = chart["title"] or suptitle
        elif charts:
            chart = {"type": "superchart", "title": suptitle, "elements": charts}
        else:
            chart = _unknown(suptitle)
        return chart
    except Exception:  # a figure in a state nothing here expected: still a valid chart
        return _unknown(None)


def _axes_chart(ax: Any) -> Optional[dict[str, Any]]:
    """An Axes' chart, None for an Axes with nothing drawn on it."""
    if not any((ax.lines, ax.collections, ax.patches, ax.images, ax.texts, ax.tables, ax.artists)):
        return None
    try:
        return _describe(ax)
    except Exception:  # see chart_of
        return _unknown(_title(ax))


def _describe(ax: Any) -> dict[str, Any]:
    from matplotlib.collections import PathCollection
    from matplotlib.container import BarContainer
    from matplotlib.patches import Wedge

    title = _title(ax)
    if ax.name != "rectilinear":
        return _unknown(title)
    wedges = [p for p in ax.patches if isinstance(p, Wedge)]
    if wedges:
        return {"type": "pie", "title": title, "elements": [e for e in map(_wedge, wedges) if e is not None]}
    x, y = AxisView(ax, "x"), AxisView(ax, "y")
    bars = [c for c in ax.containers if isinstance(c, BarContainer)]
    if bars:
        elements = [e for c in bars for e in _bars(c, x, y)]
        return _chart_2d("bar", title, x, y, elements)
    boxes = find_boxes(ax)
    if boxes is not None:
        vertical, found = boxes
        places = x if vertical else y
        elements = [{"label": places.name_at(b.position), "min": b.minimum, "first_quartile": b.first_quartile,
                     "median": b.median, "third_quartile": b.third_quartile, "max": b.maximum,
                     "outliers": b.outliers} for b in found]
        return _chart_2d("box_and_whisker", title, x, y, elements)
    in_data = ax.transData
    lines = [line for line in ax.lines if line.get_transform() == in_data]
    scatters = [c for c in ax.collections if isinstance(c, PathCollection) and _offset_transform(c) == in_data]
    series = [_series(line.get_label(), line.get_xydata(), x, y) for line in lines]
    if scatters:
        series += [_series(c.get_label(), c.get_offsets(), x, y) for c in scatters]
        return _chart_2d("scatter", title, x, y, series)
    if lines:
        return _chart_2d("line", title, x, y, series)
    return _unknown(title)


def _chart_2d(kind: str, title: Optional[str], x: AxisView, y: AxisView, elements: list) -> dict[str, Any]:
    return {"type": kind, "title": title, **x.fields(), **y.fields(), "elements": elements}


def _series(label: Any, xy: Any, x: AxisView, y: AxisView) -> dict[str, Any]:
    """A named run of points; points with a coordinate missing (NaN, masked) are left out."""
    array = np.ma.filled(np.ma.asarray(xy, dtype=float), np.nan).reshape(-1, 2)
    pairs = zip(x.coordinates(array[:, 0]), y.coordinates(array[:, 1]))
    return {"label": str(label), "points": [[cx, cy] for cx, cy in pairs if cx is not None and cy is not None]}


def _bars(container: Any, x: AxisView, y: AxisView) -> list[dict[str, Any]]:
    vertical = getattr(container, "orientation", "vertical") != "horizontal"
    group = str(container.get_label())
    elements = []
    for bar in container.patches:
        left, bottom, width, height = bar.get_x(), bar.get_y(), bar.get_width(), bar.get_height()
        if vertical:
            place, value = x.name_at(left, left + width), finite_number(height)
        else:
            place, value = y.name_at(bottom, bottom + height), finite_number(width)
        if value is not None:
            elements.append({"label": place, "group": group, "value": value})
    return elements


def _wedge(wedge: Any) -> Optional[dict[str, Any]]:
    angle, radius = finite_number(wedge.theta2 - wedge.theta1), finite_number(wedge.r)
    if angle is None or radius is None:
        return None
    return {"label": str(wedge.get_label()), "angle": angle, "radius": radius}


def _unknown(title: Optional[str]) -> dict[str, Any]:
    return {"type": "unknown", "title": title, "elements": []}


def _shown(ax: Any) -> bool:
    """A visible Axes that is not a colorbar's."""
    return bool(ax.get_visible()) and ax.get_label() != "<colorbar>"


def _title(ax: Any) -> Optional[str]:
    return ax.get_title() or ax.get_title(loc="left") or ax.get_title(loc="right") or None


def _suptitle(figure: Any) -> Optional[str]:
    getter = getattr(figure, "get_suptitle", None)  # matplotlib 3.8 and later
    if getter is not None:
        return getter() or None
    text = getattr(figure, "_suptitle", None)  # earlier: the Text that suptitle() made, if any
    return (text.get_text() or None) if text is not None else None


def _offset_transform(collection: Any) -> Any:
    getter = getattr(collection, "get_offset_transform", None) or collection.get_transOffset
    return getter()
