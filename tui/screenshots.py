"""Export SVG screenshots of the main watch screens from a real runs folder.

    python -m tui.screenshots RUNS_DIR [OUT_DIR]      # OUT_DIR defaults to docs/screens

The app opens on RUNS_DIR (paths shown relative to its parent, as `skyrl watch` run
there would show them) and walks the screens: the runs list, the newest run, its rollouts
and a trajectory. docs/screens/README.md names the command that produced the run shown.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from tui.app import WatchApp


async def export(runs_dir: Path, out: Path, size: tuple[int, int] = (100, 30)) -> list[Path]:
    """Drive the app through its screens, saving one SVG per screen into `out`."""
    out.mkdir(parents=True, exist_ok=True)
    saved: list[Path] = []
    app = WatchApp(runs_dir=runs_dir)
    async with app.run_test(size=size) as pilot:

        async def shot(name: str) -> None:
            await pilot.pause()
            saved.append(Path(app.save_screenshot(f"{name}.svg", path=str(out))))

        await shot("runs")
        await pilot.press("enter")
        await shot("run")
        await pilot.press("enter")
        await shot("trajectory")
        await pilot.press("escape", "c")
        await shot("config")
        await pilot.press("escape", "question_mark")
        await shot("help")
    return saved


def main() -> None:
    if len(sys.argv) < 2 or not Path(sys.argv[1]).is_dir():
        print("usage: python -m tui.screenshots RUNS_DIR [OUT_DIR]", file=sys.stderr)
        raise SystemExit(2)
    runs = Path(sys.argv[1]).resolve()
    out = Path(sys.argv[2] if len(sys.argv) > 2 else "docs/screens").resolve()
    cwd = os.getcwd()
    os.chdir(runs.parent)  # relative paths on screen, as the user who ran it sees them
    try:
        saved = asyncio.run(export(Path(runs.name), out))
    finally:
        os.chdir(cwd)
    for path in saved:
        print(path)


if __name__ == "__main__":
    main()
