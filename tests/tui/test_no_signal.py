"""Issue 13, items 5 and 16 in the reader: the no-learning-signal rule, dot-folders are no runs."""

from __future__ import annotations

import json
from pathlib import Path

from tui.reader import ZERO_VARIANCE_STEPS, RunReader, list_runs
from tui.summary import summary_text
from tui.synthetic import make_run, metric


def _run_with(tmp_path: Path, zero_variance: list[float]) -> Path:
    run = make_run(tmp_path, "math-20261201-120000", steps=0, state="running")
    with (run / "metrics.jsonl").open("a") as f:
        for step, z in enumerate(zero_variance, 1):
            f.write(json.dumps({**metric(step, 0.0), "groups/zero_variance": z}) + "\n")
    return run


def test_no_learning_signal_needs_most_groups_flat_for_several_steps(tmp_path):
    flat = [1.0] * ZERO_VARIANCE_STEPS
    assert RunReader(_run_with(tmp_path / "a", flat)).no_learning_signal
    assert "no learning signal" in summary_text(RunReader(_run_with(tmp_path / "b", flat)))
    assert not RunReader(_run_with(tmp_path / "c", flat[:-1])).no_learning_signal
    assert not RunReader(_run_with(tmp_path / "d", [*flat, 0.25])).no_learning_signal
    assert not RunReader(_run_with(tmp_path / "e", [0.5, 0.25, *flat[:-1]])).no_learning_signal
    assert "no learning signal" not in summary_text(RunReader(_run_with(tmp_path / "f", [0.0])))


def test_dot_folders_are_never_runs(tmp_path):
    make_run(tmp_path, "math-20261201-120000", steps=1, state="finished")
    store = tmp_path / ".mlflow"
    store.mkdir()
    (store / "status.json").write_text("{}")  # even one that looks like a run
    assert [r.id for r in list_runs(tmp_path)] == ["math-20261201-120000"]
