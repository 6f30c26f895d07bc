"""The watch UI driven by a Textual pilot at 80x24 over synthetic run directories."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from textual.widgets import DataTable, Input, Static

from tui.app import ConfigScreen, HelpScreen, RunScreen, RunsScreen, TrajectoryScreen, WatchApp
from tui.chart import LineChart
from tui.synthetic import append_metric, write_rollouts, write_status

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
        assert "reward 0.635" in text and "1.39 ep/s" in text and "240 tok/s" in text
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
