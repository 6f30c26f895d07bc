"""`skyrl watch` on an async run (issue 18): the staleness histogram, dropped samples, buffer
depth and idle fractions, from metrics.jsonl alone; a sync run shows no async line."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from skyrl_cli.main import app
from tui.synthetic import make_run

ASYNC = {
    "staleness/hist/0": 8.0,
    "staleness/hist/1": 16.0,
    "staleness/hist/2": 8.0,
    "staleness/hist/3": 0.0,
    "staleness/mean": 1.0,
    "staleness/max": 2.0,
    "async/dropped": 3.0,
    "async/buffer_depth": 8.0,
    "perf/engine_idle": 0.25,
    "perf/learner_idle": 0.05,
}


def _once(run: Path) -> str:
    result = CliRunner().invoke(app, ["watch", "--once", str(run)])
    assert result.exit_code == 0, result.output
    return result.output


def test_watch_shows_the_async_metrics(tmp_path: Path) -> None:
    run = make_run(tmp_path / "runs", "slow-20261201-120000", steps=3, max_steps=10)
    lines = (run / "metrics.jsonl").read_text().splitlines()
    last = json.loads(lines[-1]) | ASYNC
    (run / "metrics.jsonl").write_text("\n".join([*lines[:-1], json.dumps(last)]) + "\n")
    out = _once(run)
    assert "async    staleness 1.0 max 2 (0:8 1:16 2:8 3:0)  dropped 3" in out
    assert "buffer 8 groups  engine idle 25%  learner idle 5%" in out
    assert max(map(len, out.splitlines())) <= 80
    sync = make_run(tmp_path / "runs", "sync-20261201-120000", steps=3, max_steps=10)
    assert "staleness" not in _once(sync)


def test_run_screen_header_shows_the_async_metrics(tmp_path: Path) -> None:
    """The live run screen's header carries the same two parts (Textual pilot)."""
    import asyncio

    from tui.app import WatchApp

    run = make_run(tmp_path / "runs", "slow-20261201-120000", steps=3, max_steps=10)
    lines = (run / "metrics.jsonl").read_text().splitlines()
    last = json.loads(lines[-1]) | ASYNC
    (run / "metrics.jsonl").write_text("\n".join([*lines[:-1], json.dumps(last)]) + "\n")

    async def body() -> str:
        app = WatchApp(run_dir=run)
        async with app.run_test(size=(160, 30)) as pilot:
            await pilot.pause()
            return "\n".join(s.text for s in app.screen._compositor.render_strips())

    text = asyncio.run(body())
    assert "async staleness 1.0 max 2 (0:8 1:16 2:8 3:0)  dropped 3  buffer 8 groups" in text
