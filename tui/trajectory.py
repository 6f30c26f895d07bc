"""The trajectory screen: one episode's outcome, timings and turns.

Environment observations that hold a result table (the SQL environment's `format_table`:
a header line, one line per row, cells joined by ` | `, then a `(N rows)` line) are drawn
as a Rich table; everything else is plain text, and errors are red.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from rich import box
from rich.console import Group, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from tui.summary import fmt

SEP = " | "
_COUNT_LINE = re.compile(r"^(\(\d+ rows?\)|\.\.\. \(.*rows; showing \d+\))$")
"""The row-count line `format_table` ends with: `(3 rows)` or `... (more than 50 rows; showing 40)`."""


@dataclass
class TextTable:
    """A table found inside an observation, with the text around it."""

    before: str
    columns: list[str]
    rows: list[list[str]]
    caption: str
    after: str


def find_table(text: str) -> TextTable | None:
    """The first ` | `-separated table in `text`, or None when there is none.

    With a row-count line, the table is the block of non-empty lines right above it (so a
    one-column result counts too); without one, at least two consecutive lines with
    ` | ` and the same number of cells. Every line must have as many cells as the header.
    """
    lines = text.split("\n")
    count = next((i for i, line in enumerate(lines) if _COUNT_LINE.match(line.strip())), None)
    if count is not None:
        start = count
        while start > 0 and lines[start - 1].strip():
            start -= 1
        found = _table(lines, start, count, caption=lines[count], after=count + 1)
        if found:
            return found
    i = 0
    while i < len(lines):
        j = i
        while j < len(lines) and SEP in lines[j]:
            j += 1
        if j - i >= 2:
            found = _table(lines, i, j, caption="", after=j)
            if found:
                return found
        i = j + 1
    return None


def _table(lines: list[str], start: int, end: int, caption: str, after: int) -> TextTable | None:
    if end <= start:
        return None
    cells = [line.split(SEP) for line in lines[start:end]]
    if any(len(row) != len(cells[0]) for row in cells):
        return None
    return TextTable(
        before="\n".join(lines[:start]),
        columns=cells[0],
        rows=cells[1:],
        caption=caption,
        after="\n".join(lines[after:]),
    )


def render_observation(text: str) -> RenderableType:
    """An observation as text, with a result table drawn as a Rich table; red on error."""
    if text.startswith("Error:"):
        return Text(text, style="red")
    found = find_table(text)
    if found is None:
        return Text(text)
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold")
    for name in found.columns:
        table.add_column(name)
    for row in found.rows:
        table.add_row(*row)
    parts: list[RenderableType] = []
    if found.before.strip():
        parts.append(Text(found.before))
    parts.append(table)
    if found.caption:
        parts.append(Text(found.caption.strip(), style="dim"))
    if found.after.strip():
        parts.append(Text(found.after.strip()))
    return Group(*parts)


def header(t: dict[str, Any]) -> Text:
    """Where the episode came from, then its outcome: final reward, stop reason, timings."""
    timings = t.get("timings") or {}
    stop = str(t.get("stop_reason", "?"))
    return Text.assemble(
        (f"step {t.get('step', '?')}  task {t.get('task_id', '?')}", "bold"),
        f"  turns {t.get('num_turns', '?')}  length {t.get('response_len', '?')}",
        "\nfinal reward ",
        (fmt(t.get("reward"), "+.3f"), "bold"),
        "  stop ",
        (stop, "red" if stop == "error" or t.get("error") else ""),
        f"  generate {fmt(timings.get('generate'), '.2f')} s",
        f"  env {fmt(timings.get('env'), '.2f')} s",
    )


class TrajectoryScreen(Screen[None]):
    """Every turn of one trajectory, styled by role; errors in red."""

    BINDINGS = [Binding("escape", "app.pop_screen", "back")]

    def __init__(self, traj: dict[str, Any]) -> None:
        super().__init__()
        self.traj = traj

    def compose(self) -> ComposeResult:
        t = self.traj
        yield Static(header(t), id="traj-header")
        with VerticalScroll(id="turns"):
            if t.get("error"):
                yield Static(f"error: {escape(str(t['error']))}", classes="turn error")
            seen_user = False
            for turn in t.get("turns") or []:
                role = str(turn.get("role", "?"))
                text = str(turn.get("text", ""))
                # User turns after the first are environment observations.
                observation = role == "user" and seen_user
                seen_user |= role == "user"
                with Vertical(classes=f"turn role-{role}"):
                    yield Static("observation" if observation else role, classes="role")
                    body = render_observation(text) if observation else Text(text)
                    yield Static(body, classes="text")
            if t.get("info"):
                yield Static(Text(f"info: {t['info']}"), classes="turn info")
        yield Footer()
