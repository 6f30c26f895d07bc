"""SVG snapshots of the main screens at 80x24 (pytest-textual-snapshot).

Update after an intended UI change: pytest tests/tui --snapshot-update
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tui.app import WatchApp
from tui.synthetic import make_run

pytest.importorskip("pytest_textual_snapshot")

SIZE = (80, 24)


@pytest.fixture
def finished_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Finished runs only (no live clock in the picture), addressed by relative paths."""
    monkeypatch.chdir(tmp_path)
    runs = Path("runs")
    make_run(runs, "math-20261130-100000", env="math", steps=30, max_steps=30, state="finished")
    make_run(runs, "sql-20261130-110000", steps=5, state="failed")
    return runs


def test_runs_list(snap_compare, finished_runs: Path) -> None:
    assert snap_compare(WatchApp(runs_dir=finished_runs), terminal_size=SIZE)


def test_run_view(snap_compare, finished_runs: Path) -> None:
    app = WatchApp(run_dir=finished_runs / "math-20261130-100000")
    assert snap_compare(app, terminal_size=SIZE)


def test_trajectory(snap_compare, finished_runs: Path) -> None:
    app = WatchApp(run_dir=finished_runs / "math-20261130-100000")
    assert snap_compare(app, press=["slash", *"error", "enter", "enter"], terminal_size=SIZE)


def test_trajectory_with_result_table(snap_compare, finished_runs: Path) -> None:
    app = WatchApp(run_dir=finished_runs / "math-20261130-100000")
    assert snap_compare(app, press=["enter"], terminal_size=SIZE)


def test_run_view_failed_and_filtered(snap_compare, finished_runs: Path) -> None:
    app = WatchApp(run_dir=finished_runs / "sql-20261130-110000")
    assert snap_compare(app, press=["g", "z"], terminal_size=SIZE)
