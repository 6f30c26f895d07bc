"""`skyrl watch --once` through the real Typer app, on synthetic run directories."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from skyrl_cli.main import app

runner = CliRunner()


def test_once_summarizes_latest_run(runs_dir: Path) -> None:
    result = runner.invoke(app, ["watch", "--once", "--runs-dir", str(runs_dir)])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "sql-20261130-120000" in out
    assert "state    running   step 20/50" in out
    assert "reward   mean 0.635  min 0.235  max 0.935" in out
    assert "loss     0.0238" in out and "entropy 1.000" in out
    assert "1.39 episodes/s" in out and "240 tokens/s" in out
    assert "best rollouts of step 20" in out and "worst rollouts of step 20" in out
    assert "The answer is 12 rows (step 20" in out
    assert "error: sqlite3.OperationalError" in out
    assert len(out.splitlines()) <= 24 and max(map(len, out.splitlines())) <= 80


def test_once_on_explicit_failed_run_shows_error(runs_dir: Path) -> None:
    run = runs_dir / "sql-20261130-110000"
    result = runner.invoke(app, ["watch", "--once", str(run)])
    assert result.exit_code == 0, result.output
    assert "state    failed   step 5/50" in result.output
    assert "error    RuntimeError: CUDA out of memory" in result.output


def test_once_reads_a_read_only_copy(run_dir: Path, tmp_path: Path) -> None:
    copy = shutil.copytree(run_dir, tmp_path / "ro" / run_dir.name)
    paths = [copy, *copy.rglob("*")]
    for p in paths:
        p.chmod(p.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    try:
        before = sorted(str(p) for p in copy.rglob("*"))
        result = runner.invoke(app, ["watch", "--once", str(copy)])
        assert result.exit_code == 0, result.output
        assert "step 20/50" in result.output
        assert sorted(str(p) for p in copy.rglob("*")) == before
    finally:
        for p in paths:
            p.chmod(p.stat().st_mode | stat.S_IWUSR)


def test_no_runs_is_one_sentence_exit_0_as_skyrl_runs_says_it(tmp_path: Path) -> None:
    result = runner.invoke(app, ["watch", "--once", "--runs-dir", str(tmp_path / "none")])
    assert result.exit_code == 0  # nothing to show is no error (issue 13, item 13)
    assert result.output.strip().count("\n") == 0
    assert "skyrl train --env sql" in result.output


def test_not_a_run_dir_is_one_sentence_exit_2(tmp_path: Path) -> None:
    result = runner.invoke(app, ["watch", "--once", str(tmp_path)])
    assert result.exit_code == 2
    assert "is not a run directory" in result.output
    assert result.output.strip().count("\n") == 0


def test_without_once_opens_the_app(runs_dir: Path, run_dir: Path, monkeypatch) -> None:
    from tui.app import WatchApp

    opened: list[tuple[Path, Path | None]] = []
    monkeypatch.setattr(WatchApp, "run", lambda self: opened.append((self.runs_dir, self.run_dir)))
    assert runner.invoke(app, ["watch", "--runs-dir", str(runs_dir)]).exit_code == 0
    assert runner.invoke(app, ["watch", str(run_dir)]).exit_code == 0
    assert opened == [(runs_dir, None), (Path("runs"), run_dir)]


def test_help_has_examples() -> None:
    result = runner.invoke(app, ["watch", "--help"])
    assert result.exit_code == 0
    assert "skyrl watch --once" in result.output and "Examples" in result.output


def test_skyrl_help_does_not_import_textual() -> None:
    code = (
        "import sys; sys.argv=['skyrl','--help']\n"
        "from skyrl_cli.main import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "bad = [m for m in ('textual', 'torch', 'ray', 'mlflow', 'tui.app') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=os.getcwd()
    )
    assert proc.returncode == 0, proc.stderr
    assert "watch" in proc.stdout
