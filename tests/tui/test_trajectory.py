"""Finding the SQL environment's result tables in observations, and the run's ETA."""

from __future__ import annotations

import time
from pathlib import Path

from rich.console import Group
from rich.table import Table
from rich.text import Text

from environments.sql import format_table
from tui.reader import RunReader
from tui.synthetic import make_run, write_status
from tui.trajectory import find_table, render_observation


def test_finds_the_table_format_table_writes() -> None:
    body = format_table(["id", "name", "total"], [(1, "ann", 2.5), (2, None, 3)], more=False)
    found = find_table(body + "\nTurns left: 2")
    assert found is not None
    assert found.columns == ["id", "name", "total"]
    assert found.rows == [["1", "ann", "2.5"], ["2", "NULL", "3"]]
    assert found.caption == "(2 rows)"
    assert found.before == "" and found.after == "Turns left: 2"


def test_one_column_empty_and_cut_tables() -> None:
    one = find_table(format_table(["COUNT(*)"], [(42,)], more=False))
    assert one is not None and one.columns == ["COUNT(*)"] and one.rows == [["42"]]
    empty = find_table(format_table(["a", "b"], [], more=False))
    assert empty is not None and empty.rows == [] and empty.caption == "(0 rows)"
    cut = find_table(format_table(["a", "b"], [(i, i) for i in range(50)], more=True))
    assert cut is not None and cut.caption.startswith("... (more than 50 rows")


def test_text_without_a_table_stays_text() -> None:
    assert find_table("Turns left: 2") is None
    assert find_table("one | line only") is None
    assert find_table("a | b\n1 | 2 | 3") is None  # ragged: not a table
    assert isinstance(render_observation("just words"), Text)


def test_render_observation_table_and_error() -> None:
    rendered = render_observation(format_table(["m", "n"], [("01", 120)], more=False))
    assert isinstance(rendered, Group)
    assert any(isinstance(part, Table) for part in rendered.renderables)
    error = render_observation("Error: no such table: nope\nTurns left: 1")
    assert isinstance(error, Text) and str(error.style) == "red"


def test_eta_only_while_running(tmp_path: Path) -> None:
    run = make_run(tmp_path / "runs", steps=20, max_steps=50)
    reader = RunReader(run)
    assert reader.eta() == 30 * 11.5
    write_status(run, state="finished", finished=time.strftime("%Y-%m-%dT%H:%M:%SZ"))
    assert RunReader(run).eta() is None  # a fresh reader: no reliance on mtime resolution
