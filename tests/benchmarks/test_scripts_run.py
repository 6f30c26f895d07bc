"""The benchmark scripts still run against the current code (they are not timed tests:
docs/benchmarks.md holds the figures). One broke silently once when a config key was
renamed; this runs each on the smallest work it accepts and checks its table."""

from __future__ import annotations

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
