"""Issue 20: `skyrl watch` draws the dev accuracy recorded during training (the warm-up's at
step 0, `eval.every`'s, the final one) as points on the reward chart (Textual pilot)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from tui.synthetic import make_run


def _chart_lines(run: Path) -> list[str]:
    from tui.app import WatchApp
    from tui.chart import LineChart

    async def body() -> list[str]:
        app = WatchApp(run_dir=run)
        async with app.run_test(size=(120, 30)) as pilot:
            await pilot.pause()
            return app.screen.query_one(LineChart).render().plain.splitlines()

    return asyncio.run(body())


def _eval(run: Path, name: str, step: int, accuracy: float) -> None:
    (run / "eval").mkdir(exist_ok=True)
    report = {"n": 80, "accuracy": accuracy, "split": "dev", "step": step, "name": name}
    (run / "eval" / f"{name}.json").write_text(json.dumps(report))


def test_reward_chart_marks_each_dev_evaluation_at_its_step(tmp_path: Path) -> None:
    run = make_run(tmp_path / "runs", "sql-20261201-120000", steps=20, max_steps=20)
    _eval(run, "warmup", 0, 0.25)
    _eval(run, "step-000010", 10, 0.5)
    _eval(run, "after", 20, 1.0)
    title, *rows = _chart_lines(run)
    assert "● dev accuracy 100.0% @20" in title, title
    cols = sorted(c for row in rows for c, ch in enumerate(row) if ch == "●")
    assert len(cols) == 3, rows
    left = rows[0].index("┤") + 1  # the plot's first column
    right = left + len(rows[0][left:].rstrip("\n")) - 1
    first, middle, last = cols
    # The metrics run from step 1 to 20: step 0 (the warm-up) sits at the left edge, step 20
    # at the right one, step 10 at 9/19 of the way.
    assert first == left and last == right, (left, right, cols)
    assert abs(middle - (left + 9 / 19 * (right - left))) <= 1, (left, right, cols)
    # 1.0 is the chart's highest value: its mark is on the top row; 0.25 is on a lower one.
    assert rows[0].rstrip().endswith("●") and "●" not in rows[0][:middle], rows


def test_no_marks_without_evaluations_or_on_other_charts(tmp_path: Path) -> None:
    run = make_run(tmp_path / "runs", "sql-20261201-120000", steps=20, max_steps=20)
    title, *rows = _chart_lines(run)
    assert "●" not in title and not any("●" in r for r in rows)
