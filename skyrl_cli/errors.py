"""One-sentence errors for the user: `fail("...")` prints and exits 2, no traceback."""

from __future__ import annotations

import sys
from typing import NoReturn

import typer


def fail(message: str, code: int = 2) -> NoReturn:
    from tui.reader import terminal_safe  # messages may quote episode or task text

    print(f"error: {terminal_safe(message)}", file=sys.stderr)
    raise typer.Exit(code)
