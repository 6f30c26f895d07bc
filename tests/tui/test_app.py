"""The watch UI driven by a Textual pilot at 80x24 over synthetic run directories."""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from textual.widgets import DataTable, Input, Static

from tui.app import ConfigScreen, HelpScreen, RunScreen, RunsScreen, TrajectoryScreen, WatchApp
from tui.chart import LineChart
from tui.synthetic import append_metric, make_run, metric, write_rollouts, write_status

SIZE = (80, 24)


def run_async(fn: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async test body with asyncio (no async pytest plugin needed)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        asyncio.run(fn(*args, **kwargs))

    return wrapper


def screen_text(app: WatchApp) -> str:
    """What the terminal shows, as plain text lines."""
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


@run_async
async def test_runs_list_open_run_filter_open_trajectory(runs_dir: Path) -> None:
    app = WatchApp(runs_dir=runs_dir)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert isinstance(app.screen, RunsScreen)
        text = screen_text(app)
        for run_id in ("sql-20261130-120000", "sql-20261130-110000", "math-20261130-100000"):
            assert run_id in text
        assert "running" in text and "failed" in text and "finished" in text
        table = app.screen.query_one("#runs", DataTable)
        assert table.row_count == 3
        assert table.get_row_at(0)[0] == "sql-20261130-120000"  # newest first

        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, RunScreen)
        text = screen_text(app)
        assert "running  step 20/50" in text
        assert "reward 0.635" in text
        assert "1.39 episodes/s" in text and "240 tokens/s" in text
        # 30 steps left x 11.5 s mean `time/step` of the recent steps.
        assert re.search(r"elapsed 0:03:[45]\d  eta 0:05:45", text)
        assert "reward/mean  last 0.635" in text
        assert any(ch in text for ch in "⣀⠉⠒")  # the chart drew something
        assert len(app.screen.query_one(LineChart).values) == 20
        rollouts = app.screen.query_one("#rollouts", DataTable)
        assert rollouts.row_count == 80

        await pilot.press("slash")
        assert isinstance(app.focused, Input)
        await pilot.press(*"no such column")
        await pilot.pause()
        shown = app.screen.shown
        assert 0 < len(shown) < 80 and all(t["error"] for t in shown)
        assert rollouts.row_count == len(shown)

        await pilot.press("enter")  # leaves the filter for the table
        assert isinstance(app.focused, DataTable)
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, TrajectoryScreen)
        text = screen_text(app)
        assert "error: sqlite3.OperationalError: no such column: foo" in text
        assert "system" in text and "assistant" in text
        assert "SELECT strftime" in text
        error = app.screen.query_one(".error")
        assert error.styles.color.r > error.styles.color.g  # red
        roles = {w.classes for w in app.screen.query(".turn")}
        assert frozenset({"turn", "role-assistant"}) in roles

        await pilot.press("escape")
        assert isinstance(app.screen, RunScreen)
        await pilot.press("escape")
        assert isinstance(app.screen, RunsScreen)


@run_async
async def test_sort_by_reward_and_reverse(run_dir: Path) -> None:
    app = WatchApp(run_dir=run_dir)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, RunScreen)
        await pilot.press("s", "s")  # step -> task -> reward
        assert screen.sort_by == "reward"
        rewards = [t["reward"] for t in screen.shown]
        assert rewards == sorted(rewards)
        await pilot.press("r")
        await pilot.pause()
        rewards = [t["reward"] for t in screen.shown]
        assert rewards == sorted(rewards, reverse=True)
        assert "reward ▼" in screen_text(app)


@run_async
async def test_live_update_while_running(run_dir: Path) -> None:
    app = WatchApp(run_dir=run_dir)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, RunScreen)
        assert "step 20/50" in screen_text(app)
        # A burst: two steps land between polls.
        for step in (21, 22):
            append_metric(run_dir, step)
            write_rollouts(run_dir, step, 16)
        write_status(run_dir, step=22, last_reward=0.7)
        await pilot.pause(1.5)
        text = screen_text(app)
        assert "step 22/50" in text
        assert len(screen.query_one(LineChart).values) == 22
        assert screen.shown[-1]["step"] == 22
        table = screen.query_one("#rollouts", DataTable)
        assert table.row_count == 112
        assert table.cursor_row == table.row_count - 1  # follow keeps the newest selected
        await pilot.press("f")
        assert not screen.follow


@run_async
async def test_empty_runs_dir_tells_how_to_start(tmp_path: Path) -> None:
    app = WatchApp(runs_dir=tmp_path / "runs")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert "skyrl train --env sql" in screen_text(app)


@run_async
async def test_config_help_and_quit(run_dir: Path) -> None:
    app = WatchApp(run_dir=run_dir)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("c")
        assert isinstance(app.screen, ConfigScreen)
        text = screen_text(app)
        assert "name: sql" in text and "algorithm:" in text
        assert "max_steps: 50" in str(app.screen.query_one("#config", Static).content)
        await pilot.press("escape", "question_mark")
        assert isinstance(app.screen, HelpScreen)
        assert "follow" in screen_text(app)
        await pilot.press("escape")
        assert isinstance(app.screen, RunScreen)
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code == 0


@run_async
async def test_typing_q_in_filter_does_not_quit(run_dir: Path) -> None:
    app = WatchApp(run_dir=run_dir)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("slash", "q", "c")
        assert app.screen.query_one("#filter", Input).value == "qc"
        assert isinstance(app.screen, RunScreen)


@run_async
async def test_finished_run_shows_no_eta(runs_dir: Path) -> None:
    app = WatchApp(run_dir=runs_dir / "math-20261130-100000")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        text = screen_text(app)
        assert "finished  step 30/30  elapsed" in text
        assert "eta" not in text


@run_async
async def test_reward_band_and_chart_switcher(run_dir: Path) -> None:
    app = WatchApp(run_dir=run_dir)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        chart = app.screen.query_one(LineChart)
        assert chart.title == "reward/mean"
        assert len(chart.band) == 20
        first = metric(1, 0.0)
        assert chart.band[0] == (first["reward/min"], first["reward/max"])
        assert all(lo <= v <= hi for (lo, hi), v in zip(chart.band, chart.values, strict=True))
        styles = {str(span.style) for span in chart.render().spans}
        assert "dim green" in styles and "green" in styles  # band under a brighter line
        assert "min..max" in screen_text(app)

        seen = []
        for _ in range(5):
            await pilot.press("g")
            await pilot.pause()
            seen.append(chart.title)
            assert f"{chart.title}  last" in screen_text(app)
        assert seen == ["response_len/mean", "kl", "entropy", "loss", "reward/mean"]
        await pilot.press("g", "g", "g", "g")  # loss: no band
        await pilot.pause()
        assert chart.band == [] and len(chart.values) == 20
        assert chart.values[-1] == metric(20, 0.0)["loss"]
        assert "dim green" not in {str(span.style) for span in chart.render().spans}


@run_async
async def test_quick_filters_zero_reward_failed_and_task(run_dir: Path) -> None:
    app = WatchApp(run_dir=run_dir)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, RunScreen)
        status = screen.query_one("#rollouts-status", Static)
        assert "80 of 80 rollouts" in screen_text(app)
        assert "filters" not in screen_text(app)

        await pilot.press("z")
        await pilot.pause()
        zero = screen.shown
        assert zero and all(abs(t["reward"]) < 1e-9 for t in zero)
        assert len(zero) == sum(1 for t in screen.reader.rollouts if t["reward"] == 0)
        assert f"{len(zero)} of 80 rollouts  filters: reward=0" in screen_text(app)

        await pilot.press("z", "x")
        await pilot.pause()
        failed = screen.shown
        assert failed and all(t["error"] for t in failed)
        assert len(failed) < len(zero) or all(t["reward"] == 0 for t in failed)
        assert "filters: failed" in str(status.content)

        await pilot.press("x", "slash", *"task:avg_basket-2", "enter")
        await pilot.pause()
        assert {t["task_id"] for t in screen.shown} == {"avg_basket-2"}
        assert len(screen.shown) == 5  # one sample of that task in each of 5 steps
        assert "filters: 'task:avg_basket-2'" in screen_text(app)
        await pilot.press("z")
        await pilot.pause()
        assert "filters: reward=0  'task:avg_basket-2'" in screen_text(app)


@run_async
async def test_trajectory_header_and_result_table(run_dir: Path) -> None:
    app = WatchApp(run_dir=run_dir)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("enter")  # the newest rollout: no error, a table observation
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, TrajectoryScreen)
        traj = screen.traj
        assert traj["error"] is None
        text = screen_text(app)
        reward = f"{traj['reward']:+.3f}"
        assert f"final reward {reward}  stop {traj['stop_reason']}" in text
        assert "generate 0.40 s  env 0.01 s" in text
        # The SQL result is a Rich table: columns aligned, no ` | ` separators left.
        assert "01 | 120" not in text
        assert any(line.split() == ["█", "m", "COUNT(*)"] for line in text.splitlines())
        assert any(line.split() == ["█", "01", "120"] for line in text.splitlines())
        assert "(2 rows)" in text and "Turns left: 2" in text


@run_async
async def test_failed_episode_is_red_in_trajectory(run_dir: Path) -> None:
    app = WatchApp(run_dir=run_dir)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("x", "enter")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, TrajectoryScreen)
        header = screen.query_one("#traj-header", Static).content
        assert "stop error" in str(header)
        assert any("red" in str(span.style) for span in header.spans)  # type: ignore[union-attr]
        assert "Error: no such column: foo" in screen_text(app)


@run_async
async def test_crashed_run_shows_its_error(tmp_path: Path) -> None:
    run = make_run(tmp_path / "runs", "sql-20261130-130000", steps=7, state="failed")
    app = WatchApp(run_dir=run)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        text = screen_text(app)
        assert "failed  step 7/50" in text
        assert "error: RuntimeError: CUDA out of memory" in text
        assert "eta" not in text
        header = app.screen.query_one("#run-header", Static).content
        error_spans = [s for s in header.spans if "red" in str(s.style)]  # type: ignore[union-attr]
        assert any("bold" in str(s.style) for s in error_spans)
