"""Synthetic run directories (docs/run-format.md) for the watch UI tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tui.synthetic import make_run


@pytest.fixture
def runs_dir(tmp_path: Path) -> Path:
    """A runs folder with a finished, a failed and a running run (the latest)."""
    runs = tmp_path / "runs"
    make_run(runs, "math-20261130-100000", env="math", steps=30, max_steps=30, state="finished")
    make_run(runs, "sql-20261130-110000", steps=5, state="failed")
    make_run(runs, "sql-20261130-120000", steps=20, max_steps=50, rollout_steps=5)
    return runs


@pytest.fixture
def run_dir(runs_dir: Path) -> Path:
    return runs_dir / "sql-20261130-120000"
