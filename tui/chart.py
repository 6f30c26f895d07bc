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


def _dot_grid(width: int, height: int) -> list[list[int]]:
    return [[0] * width for _ in range(height)]


def _y_of(v: float, rows: int, lo: float, hi: float) -> int:
    span = (hi - lo) or 1.0
    return min(rows - 1, max(0, round((hi - v) / span * (rows - 1))))


def line_grid(
    values: list[float], width: int, height: int, lo: float, hi: float
) -> list[list[int]]:
    """Braille bits per cell of `values` drawn left to right, `lo` at the bottom."""
    cols, rows = width * 2, height * 4
    grid = _dot_grid(width, height)
    prev: int | None = None
    for x, v in enumerate(resample(values, cols)):
        y = _y_of(v, rows, lo, hi)
        # Join to the previous point with a vertical run, so steep changes stay connected.
        top, bottom = (y, y) if prev is None else (min(y, prev), max(y, prev))
        for yy in range(top, bottom + 1):
            grid[yy // 4][x // 2] |= _DOTS[yy % 4][x % 2]
        prev = y
    return grid


def band_grid(
    lows: list[float], highs: list[float], width: int, height: int, lo: float, hi: float
) -> list[list[int]]:
    """Braille bits per cell of the area between `lows` and `highs`, filled."""
    cols, rows = width * 2, height * 4
    grid = _dot_grid(width, height)
    for x, (a, b) in enumerate(zip(resample(lows, cols), resample(highs, cols), strict=True)):
        top, bottom = sorted((_y_of(a, rows, lo, hi), _y_of(b, rows, lo, hi)))
        for yy in range(top, bottom + 1):
            grid[yy // 4][x // 2] |= _DOTS[yy % 4][x % 2]
    return grid


def _cells(row: list[int]) -> str:
    return "".join(chr(0x2800 + c) if c else " " for c in row)


def braille_lines(values: list[float], width: int, height: int, lo: float, hi: float) -> list[str]:
    """Draw `values` left to right on a `width` x `height` cell grid, `lo` at the bottom."""
    return [_cells(row) for row in line_grid(values, width, height, lo, hi)]


def num(v: float) -> str:
    """3 decimals for small values (rewards, losses), 1 for large ones (token counts)."""
    return f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}"


LINE_STYLE = "green"
BAND_STYLE = "dim green"
"""The band (e.g. reward min..max) is dimmer than the mean line drawn over it."""
MARK_STYLE = "bold yellow"
"""Marks (e.g. dev accuracy at the steps it was scored) are drawn over the line."""


def mark_cells(
    marks: list[tuple[float, float]], width: int, height: int, lo: float, hi: float
) -> dict[tuple[int, int], float]:
    """(row, column) of the cell of each mark, given as (position 0..1 along x, value)."""
    rows = height * 4
    cells: dict[tuple[int, int], float] = {}
    for pos, v in marks:
        col = min(width - 1, max(0, round(pos * (width * 2 - 1)) // 2))
        cells[(_y_of(v, rows, lo, hi) // 4, col)] = v
    return cells


class LineChart(Widget):
    """A titled line chart of one series, with an optional min..max band under it.

    Set `title`, `band`, `marks` and then `values` (the reactive that redraws).
    """

    DEFAULT_CSS = """
    LineChart { height: 8; }
    """

    values: reactive[list[float]] = reactive(list, always_update=True)

    def __init__(self, title: str = "", *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.title = title
        self.band: list[tuple[float, float]] = []
        """(low, high) per step, the same length as `values`; empty for no band."""
        self.marks: list[tuple[float, float]] = []
        """Points drawn as ● over the line: (position 0..1 along x, value), same y axis."""
        self.mark_label = ""
        """Says what the marks are, after the title (e.g. `dev accuracy 54.2% @30`)."""

    def render(self) -> Text:
        width, height = self.size.width, self.size.height
        values = self.values
        text = Text(no_wrap=True, overflow="crop")
        text.append(self.title, style="bold")
        if not values:
            text.append("  (no data yet)", style="dim")
            return text
        band = self.band if len(self.band) == len(values) else []
        lows, highs = [b[0] for b in band], [b[1] for b in band]
        mark_values = [v for _, v in self.marks]
        lo, hi = min(values + lows + mark_values), max(values + highs + mark_values)
        if hi == lo:  # a flat series: draw it across the middle, not along the top
            lo, hi = lo - 1, hi + 1
        text.append(
            f"  last {num(values[-1])}  min {num(min(values))}  max {num(max(values))}"
            f"  ({len(values)} steps)"
        )
        if band:
            text.append("  ▒ min..max", style=BAND_STYLE)
        if self.marks:
            text.append(f"  ● {self.mark_label}", style=MARK_STYLE)
        label_w = 7
        plot_h, plot_w = max(1, height - 1), max(2, width - label_w - 1)
        line = line_grid(values, plot_w, plot_h, lo, hi)
        under = band_grid(lows, highs, plot_w, plot_h, lo, hi) if band else None
        marked = mark_cells(self.marks, plot_w, plot_h, lo, hi)
        for i, row in enumerate(line):
            label = num(hi) if i == 0 else ""
            if i == len(line) - 1 and len(line) > 1:
                label = num(lo)
            text.append("\n" + f"{label:>{label_w}}", style="dim")
            text.append("┤" if label else "│", style="dim")
            if under is None and not any(r == i for r, _ in marked):
                text.append(_cells(row), style=LINE_STYLE)
                continue
            # A mark wins its cell; then the line; elsewhere the band shows, dimmer.
            for c, bits in enumerate(row):
                band_bits = under[i][c] if under is not None else 0
                if (i, c) in marked:
                    text.append("●", style=MARK_STYLE)
                elif bits:
                    text.append(chr(0x2800 + bits), style=LINE_STYLE)
                else:
                    text.append(chr(0x2800 + band_bits) if band_bits else " ", style=BAND_STYLE)
        return text
