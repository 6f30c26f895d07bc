"""`skyrl eval --suite`: run an agent on SWE-bench-format instances and grade its patches.

    skyrl eval --suite swe-bench-mini --agent gold            # sanity: everything resolves
    skyrl eval --suite swe-bench-mini --model smollm2-135m --max-turns 6
    skyrl eval --suite instances.jsonl --repos ./repos --slice 0:20 --model runs/<id> --resume

Calls `agents.eval_swe.run_swe_eval` (the agents, the grading, the output folder) with a
progress line per finished instance, then prints the summary.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from agents.eval_swe import SweEvalOptions, save_result
from environments.swe_harness import GradeResult
from tui.reader import terminal_safe

__all__ = ["Recorder", "SweEvalOptions", "print_summary", "run_swe_eval"]


def run_swe_eval(opts: SweEvalOptions) -> dict[str, Any]:
    """Run the agent on the selected instances; print the summary; return the report."""
    from agents import eval_swe
    from agents.eval_env import load_policy, note
    from skyrl_cli.eval_run import resolve_eval_model

    rep, out = eval_swe.run_swe_eval(
        opts, lambda model: load_policy(resolve_eval_model(model)), Recorder
    )
    print_summary(rep, rep["wall_time_s"])
    note(f"wrote {out}/report.json, predictions.jsonl and logs/")
    if rep["error_instances"]:
        from skyrl_cli.errors import fail

        fail(
            f"{rep['error_instances']} of {rep['total_instances']} instances could not be "
            f"graded (error); each one's cause is in {out}/logs/<id>/result.json",
            code=1,
        )
    return rep


class Recorder:
    """Saves each finished instance (from any worker thread) and prints a progress line."""

    def __init__(self, out: Path, total: int) -> None:
        self.out, self.total, self.done, self.start = out, total, 0, time.time()
        self.lock = threading.Lock()

    def __call__(self, result: GradeResult, trajectory: dict[str, Any] | None = None) -> None:
        save_result(self.out, result, trajectory)
        state = (
            "resolved"
            if result.resolved
            else "empty patch"
            if result.empty_patch
            else (f"error: {result.error}" if result.error else "unresolved")
        )
        if result.note and not result.resolved:
            state += f" ({result.note})"
        if result.python_mismatch:
            state += f" [python_mismatch: {result.python_mismatch}]"
        with self.lock:
            self.done += 1
            spent = time.time() - self.start
            eta = spent / self.done * (self.total - self.done)
            line = f"[{self.done}/{self.total}] {result.instance_id}: {state} "
            took = f"{result.duration_s:.0f}s; " if result.duration_s else ""
            print(terminal_safe(line) + f"({took}{spent:.0f}s in all, ETA {eta:.0f}s)", flush=True)


def print_summary(rep: dict[str, Any], wall: float) -> None:
    """Resolved / unresolved / empty / error counts and the resolved rate, on stdout."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    total = rep["total_instances"]
    title = f"{rep['suite']} - agent {rep['agent']} - {rep['model_name_or_path']}"
    table = Table(title=Text(terminal_safe(title)), box=None)
    table.add_column("outcome")
    table.add_column("instances", justify="right")
    table.add_column("rate", justify="right")
    for label, key in (
        ("resolved", "resolved_instances"),
        ("unresolved", "unresolved_instances"),
        ("empty patch", "empty_patch_instances"),
        ("error", "error_instances"),
    ):
        table.add_row(label, str(rep[key]), f"{rep[key] / max(1, total):.1%}")
    table.add_row("total", str(total), "")
    Console(width=120).print(table)
    print(
        f"resolved {rep['resolved_instances']}/{total} ({rep['resolved_instances'] / max(1, total):.1%}) in {wall:.1f} s"
    )
