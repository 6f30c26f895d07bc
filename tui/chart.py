"""A braille line chart widget: a series drawn at 2x4 dots per cell, with a y axis.

Built on `Widget.render()` alone, so the UI needs nothing beyond textual.
"""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

_DOTS = ((0x01, 0x08), (0x02, 0x10), (0x04, 0x20), (0x40, 0x80))
"""Braille dot bits by (row 0-3, column 0-1) inside one cell."""


def resample(values: list[float], n: int) -> list[float]:
    """`n` points: bucket means when there are more values, interpolated when fewer."""
    if len(values) <= 1 or n <= 1:
        return list(values[:1]) * max(n, 0)
    if len(values) < n:
        out = []
        for i in range(n):
            pos = i * (len(values) - 1) / (n - 1)
            lo, frac = int(pos), pos - int(pos)
            hi_v = values[min(lo + 1, len(values) - 1)]
            out.append(values[lo] * (1 - frac) + hi_v * frac)
        return out
    out = []
    for i in range(n):
        lo, hi = i * len(values) // n, max(i * len(values) // n + 1, (i + 1) * len(values) // n)
        bucket = values[lo:hi]
        out.append(sum(bucket) / len(bucket))
    return out


def braille_lines(values: list[float], width: int, height: int, lo: float, hi: float) -> list[str]:
    """Draw `values` left to right on a `width` x `height` cell grid, `lo` at the bottom."""
    cols, rows = width * 2, height * 4
    grid = [[0] * width for _ in range(height)]
    points = resample(values, cols)
    span = (hi - lo) or 1.0

    def y_of(v: float) -> int:
        return min(rows - 1, max(0, round((hi - v) / span * (rows - 1))))

    prev: int | None = None
    for x, v in enumerate(points):
        y = y_of(v)
        # Join to the previous point with a vertical run, so steep changes stay connected.
        top, bottom = (y, y) if prev is None else (min(y, prev), max(y, prev))
        for yy in range(top, bottom + 1):
            grid[yy // 4][x // 2] |= _DOTS[yy % 4][x % 2]
        prev = y
    return ["".join(chr(0x2800 + c) if c else " " for c in row) for row in grid]


class LineChart(Widget):
    """A titled line chart of one series; set `values` to redraw."""

    DEFAULT_CSS = """
    LineChart { height: 8; }
    """

    values: reactive[list[float]] = reactive(list, always_update=True)

    def __init__(self, title: str = "", *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.title = title

    def render(self) -> Text:
        width, height = self.size.width, self.size.height
        values = self.values
        text = Text(no_wrap=True, overflow="crop")
        text.append(self.title, style="bold")
        if not values:
            text.append("  (no data yet)", style="dim")
            return text
        lo, hi = min(values), max(values)
        text.append(f"  last {values[-1]:.3f}  min {lo:.3f}  max {hi:.3f}  ({len(values)} steps)")
        label_w = 7
        plot_h, plot_w = max(1, height - 1), max(2, width - label_w - 1)
        lines = braille_lines(values, plot_w, plot_h, lo, hi)
        for i, line in enumerate(lines):
            label = f"{hi:>{label_w}.3f}" if i == 0 else ""
            if i == len(lines) - 1 and len(lines) > 1:
                label = f"{lo:>{label_w}.3f}"
            text.append("\n" + f"{label:>{label_w}}", style="dim")
            text.append("┤" if label else "│", style="dim")
            text.append(line, style="green")
        return text
