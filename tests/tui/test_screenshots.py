"""Issue 13, item 15: the README's screenshots come from a real run of a README command.

docs/screens/README.md names the command and the run; the SVGs must show that run (no
made-up one), and the exporter works on any runs folder (here, one in the documented
format) and refuses to run without one.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tui.synthetic import make_run

ROOT = Path(__file__).resolve().parents[2]
SCREENS = ROOT / "docs" / "screens"


def test_readme_screenshots_show_the_run_their_notes_name() -> None:
    notes = (SCREENS / "README.md").read_text()
    command = re.search(r"`([^`]*skyrl train[^`]*)`", notes)
    assert command, "docs/screens/README.md names the command that made the run"
    readme = (ROOT / "README.md").read_text()
    assert command.group(1) in readme, "...and the command is one of the README's"
    run_id = re.search(r"`([\w.-]+-\d{8}-\d{6})`", notes)
    assert run_id, "...and the run it shows"
    for name in ("runs", "run", "trajectory"):
        svg = (SCREENS / f"{name}.svg").read_text()
        shown = svg.replace("&#160;", " ")
        if name != "trajectory":  # a trajectory's screen names its step and task, not the run
            assert run_id.group(1) in shown, f"{name}.svg does not show {run_id.group(1)}"
        assert "20261130-1" not in shown, f"{name}.svg still shows a synthetic run"
        assert f"docs/screens/{name}.svg" in readme


def test_exporter_runs_on_a_runs_folder_and_refuses_without_one(tmp_path: Path) -> None:
    make_run(tmp_path / "runs", "math-20261201-120000", env="math", steps=6, state="finished")
    out = tmp_path / "screens"
    subprocess.run(
        [sys.executable, "-m", "tui.screenshots", str(tmp_path / "runs"), str(out)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=120,
    )
    assert {p.name for p in out.iterdir()} >= {"runs.svg", "run.svg", "trajectory.svg"}
    assert "math-20261201-120000" in (out / "run.svg").read_text().replace("&#160;", " ")
    bare = subprocess.run(
        [sys.executable, "-m", "tui.screenshots"], cwd=ROOT, capture_output=True, text=True
    )
    assert bare.returncode == 2 and "usage: python -m tui.screenshots RUNS_DIR" in bare.stderr
