"""Box-and-whisker plots recognised from the lines matplotlib's boxplot draws.

`Axes.boxplot` (and pandas' box plots, which call it) leaves no record of the statistics, only
artists: for a vertical box at position p, two whiskers (segments at p, from the first quartile
down to the minimum and from the third quartile up to the maximum), a median (a horizontal
segment centred on p between the quartiles), optionally caps (horizontal segments at the minimum
and maximum), a box (a closed outline, or a PathPatch when patch_artist=True), mean markers or a
mean line, and the outliers (a line of markers only, at p, beyond the whiskers). An Axes counts
as a box plot only when every one of its lines is such a part, so an ordinary line chart is
never mistaken for one. Horizontal box plots are the same with x and y swapped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np


@dataclass
class Box:
    """One box's statistics, in the value axis' numbers, at `position` on the other axis."""

    position: float
    minimum: float
    first_quartile: float
    median: float
    third_quartile: float
    maximum: float
    outliers: list[float] = field(default_factory=list)


def find_boxes(ax: Any) -> Optional[tuple[bool, list[Box]]]:
    """(vertical, boxes sorted by position) if `ax` holds a box plot and nothing else, else None."""
    from matplotlib.patches import PathPatch

    lines = list(ax.lines)
    if not lines or ax.collections or ax.images or any(not isinstance(p, PathPatch) for p in ax.patches):
        return None
    if any(line.get_transform() != ax.transData for line in lines):
        return None
    for vertical in (True, False):
        boxes = _match(lines, list(ax.patches), vertical)
        if boxes:
            return vertical, boxes
    return None


@dataclass
class _Part:
    """A line or box patch as (position, value) points: position along the axis the boxes sit on."""

    points: np.ndarray
    is_markers: bool
    marker: str = ""
    claimed: bool = False

    @property
    def center(self) -> float:
        return float((self.points[:, 0].min() + self.points[:, 0].max()) / 2)

    def is_segment_along_values(self) -> bool:
        p = self.points
        return not self.is_markers and len(p) == 2 and p[0, 0] == p[1, 0]

    def is_segment_across(self) -> bool:
        p = self.points
        return not self.is_markers and len(p) == 2 and p[0, 1] == p[1, 1]

    def is_outline(self) -> bool:
        p = self.points
        return not self.is_markers and len(p) >= 5 and bool(np.all(p[0] == p[-1]))


def _parts(lines: list[Any], patches: list[Any], vertical: bool) -> Optional[list[_Part]]:
    order = [0, 1] if vertical else [1, 0]
    parts = []
    for line in lines:
        points = np.asarray(line.get_xydata(), dtype=float).reshape(-1, 2)[:, order]
        if not np.all(np.isfinite(points)):
            return None
        no_line = str(line.get_linestyle()).lower() in ("none", "", " ")
        has_marker = str(line.get_marker()).lower() not in ("none", "", " ")
        parts.append(_Part(points, no_line and has_marker, str(line.get_marker())))
    for patch in patches:
        points = np.asarray(patch.get_path().vertices, dtype=float).reshape(-1, 2)[:, order]
        parts.append(_Part(points, False))
    return parts


def _match(lines: list[Any], patches: list[Any], vertical: bool) -> list[Box]:
    parts = _parts(lines, patches, vertical)
    if parts is None:
        return []
    positions = [p.points[0, 0] for p in parts if p.is_segment_along_values()]
    if not positions:
        return []
    span = max(positions) - min(positions)
    near = lambda a, b: math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9 * (span + 1))
    boxes = []
    for position in sorted(set(positions)):
        box = _box_at(position, parts, near)
        if box is None:
            return []
        boxes.append(box)
    for part in parts:
        # A line of markers with no points is a box's empty set of outliers.
        if part.is_markers and len(part.points) == 0:
            part.claimed = True
    return boxes if all(p.claimed for p in parts) else []


def _box_at(position: float, parts: list[_Part], near: Any) -> Optional[Box]:
    whiskers = [p for p in parts if p.is_segment_along_values() and near(p.points[0, 0], position)]
    if len(whiskers) != 2:
        return None
    low, high = sorted(whiskers, key=lambda p: p.points[1, 1])
    minimum, q1 = float(low.points[1, 1]), float(low.points[0, 1])
    q3, maximum = float(high.points[0, 1]), float(high.points[1, 1])
    if not minimum <= q1 <= q3 <= maximum:
        return None
    across = [p for p in parts if len(p.points) and not p.claimed and near(p.center, position)]
    medians = [p for p in across if p.is_segment_across() and q1 <= p.points[0, 1] <= q3]
    if not medians:
        return None
    # Caps are usually narrower than the box; the median spans it. Ties go to the first drawn.
    median = max(medians, key=lambda p: np.ptp(p.points[:, 0]))
    for part in (*whiskers, median):
        part.claimed = True
    for part in across:
        if part.is_segment_across() or part.is_outline():
            part.claimed = True  # a cap, the mean drawn as a line, or the box (notches may overhang)
    markers = [p for p in across if p.is_markers and np.ptp(p.points[:, 0]) == 0]
    for part in markers:
        part.claimed = True
    fliers = _fliers(markers)
    outliers = sorted(float(v) for v in fliers.points[:, 1]) if fliers is not None else []
    return Box(position, minimum, q1, float(median.points[0, 1]), q3, maximum, outliers)


def _fliers(markers: list[_Part]) -> Optional[_Part]:
    """Which of a box's marker lines holds its outliers. boxplot draws the mean's marker before
    the outliers, so with two the last is the outliers; a lone one is the mean only if it is a
    single point drawn with the mean's marker, which differs from the outliers' marker."""
    if len(markers) != 1:
        return markers[-1] if markers else None
    import matplotlib

    mean_marker = matplotlib.rcParams["boxplot.meanprops.marker"]
    only = markers[0]
    if len(only.points) == 1 and only.marker == mean_marker != matplotlib.rcParams["boxplot.flierprops.marker"]:
        return None
    return only
