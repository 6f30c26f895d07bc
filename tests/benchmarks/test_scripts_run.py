"""The benchmark scripts still run against the current code (they are not timed tests:
docs/benchmarks.md holds the figures). One broke silently once when a config key was
renamed; this runs each on the smallest work it accepts and checks its table."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str, home: Path) -> str:
    proc = subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env={"HOME": str(home), "PATH": "/usr/bin:/bin", "MLFLOW_DISABLE_TELEMETRY": "true"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_grpo_step_benchmark_prints_both_sides_and_the_ratio(tmp_path):
    out = _run("benchmarks/grpo_step.py", "--model", "tiny", "--steps", "1", home=tmp_path)
    assert re.search(r"^tiny\s+skyrl\s+[\d.]+\s+8\s+32\.0", out, re.M), out
    assert re.search(r"^tiny\s+trl\s+[\d.]+\s+8\s+32\.0", out, re.M), out
    assert re.search(r"ratio trl/skyrl: [\d.]+x", out), out


def test_env_step_benchmark_prints_a_median_per_environment(tmp_path):
    out = _run("benchmarks/env_step.py", "--steps", "5", "--env", "sql", home=tmp_path)
    assert re.search(r"^sql\s+5\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+\d+$", out, re.M), out


def test_learning_harness_reports_each_seed_and_the_mean_delta_from_real_runs(tmp_path):
    """Two real 1-step runs: the table's rows come from each run's own eval reports."""
    runs, png = tmp_path / "runs", tmp_path / "curve.png"
    args = ["--env", "math", "--model", "tiny", "--seeds", "2", "--runs-dir", str(runs)]
    args += ["--set", "trainer.max_steps=1", "--set", "eval.limit=2", "--png", str(png), "--quiet"]
    out = _run("benchmarks/learning.py", *args, home=tmp_path)
    rows = {}
    for run in (r for r in runs.iterdir() if not r.name.startswith(".")):
        seed = json.loads((run / "learning-seed.json").read_text())["seed"]
        start = json.loads((run / "eval" / "before.json").read_text())["accuracy"]
        final = json.loads((run / "eval" / "after.json").read_text())["accuracy"]
        rows[seed] = (100 * start, 100 * final)
    assert sorted(rows) == [0, 1], out
    for seed, (start, final) in rows.items():
        line = f"| {seed} | {start:.1f} | {final:.1f} | {final - start:+.1f} |"
        assert line in out, (line, out)
    assert re.search(r"^\| 0 \|.*\| [\d.]+ min \| \d+ s \|$", out, re.M), out  # seed 0's eval timed
    assert "| mean ± std |" in out and "dev tasks: 2 (greedy); seeds: 2" in out, out
    assert png.stat().st_size > 10_000
