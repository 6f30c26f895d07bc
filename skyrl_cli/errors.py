"""One-sentence errors for the user: `fail("...")` prints and exits 2, no traceback."""

from __future__ import annotations

import contextlib
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


def exit_now(code: int = 0) -> NoReturn:
    """Leave once everything is written: the exit hooks run (Ray's shutdown, MLflow's), the
    streams are flushed, and the interpreter's own finalization is skipped. After a run,
    tearing down torch and Ray's C++ threads took 3.8 s on an idle 2-core machine and 18 s
    on a busy one (docs/benchmarks.md), with nothing left to save."""
    import atexit
    import os

    close_live()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)
