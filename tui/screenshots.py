"""Export SVG screenshots of the main watch screens to docs/screens/, from a synthetic run.

python -m tui.screenshots [OUT_DIR]
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path

from tui.app import WatchApp
from tui.synthetic import make_run


async def export(out: Path, size: tuple[int, int] = (80, 24)) -> list[Path]:
    """Drive the app through its screens, saving one SVG per screen into `out`."""
    out.mkdir(parents=True, exist_ok=True)
    saved: list[Path] = []
    app = WatchApp(runs_dir=Path("runs"))
    async with app.run_test(size=size) as pilot:

        async def shot(name: str) -> None:
            await pilot.pause()
            saved.append(Path(app.save_screenshot(f"{name}.svg", path=str(out))))

        await shot("runs")
        await pilot.press("enter")
        await shot("run")
        await pilot.press("slash", *"error", "enter")
        await shot("rollouts-filtered")
        await pilot.press("enter")
        await shot("trajectory")
        await pilot.press("escape", "slash", *["backspace"] * 5, "enter", "enter")
        await shot("trajectory-table")
        await pilot.press("escape", "x", "g")
        await shot("rollouts-failed-length-chart")
        await pilot.press("c")
        await shot("config")
        await pilot.press("escape", "question_mark")
        await shot("help")
    return saved


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/screens").resolve()
    with tempfile.TemporaryDirectory() as tmp:
        # Relative paths in the screenshots: run from inside the temp folder.
        cwd = os.getcwd()
        os.chdir(tmp)
        try:
            make_run(
                Path("runs"),
                "math-20261130-100000",
                env="math",
                steps=30,
                max_steps=30,
                state="finished",
            )
            make_run(Path("runs"), "sql-20261130-110000", steps=5, state="failed")
            make_run(
                Path("runs"),
                "sql-20261130-120000",
                steps=40,
                max_steps=50,
                rollout_steps=5,
                state="finished",
            )
            saved = asyncio.run(export(out))
        finally:
            os.chdir(cwd)
    for path in saved:
        print(path)


if __name__ == "__main__":
    main()
