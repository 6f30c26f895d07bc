"""One-sentence errors for the user: `fail("...")` prints and exits 2, no traceback."""

from __future__ import annotations

import sys
from typing import NoReturn

import typer


def fail(message: str, code: int = 2) -> NoReturn:
    from tui.reader import terminal_safe  # messages may quote episode or task text

    close_live()
    print(f"error: {terminal_safe(message)}", file=sys.stderr)
    raise typer.Exit(code)


def close_live() -> None:
    """End a live progress line, if one runs, so that what follows starts on a line of its own."""
    progress = sys.modules.get("trainers.progress")
    if progress is not None:
        progress.close_live()
