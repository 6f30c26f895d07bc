"""`skyrl watch`: follow a run live in a terminal UI, or print its summary with `--once`.

Reads only the run directory (docs/run-format.md); textual is imported only when the UI
opens, so `skyrl --help` and `--once` stay fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from skyrl_cli.errors import fail


def watch(
    run_dir: Annotated[
        Path | None,
        typer.Argument(help="A run directory; default: the latest run under --runs-dir."),
    ] = None,
    runs_dir: Annotated[
        Path, typer.Option("--runs-dir", help="Folder holding run directories.")
    ] = Path("runs"),
    once: Annotated[
        bool, typer.Option("--once", help="Print a one-screen text summary and exit.")
    ] = False,
) -> None:
    """Watch a run: reward curve, metrics, rollouts and trajectories, updated live.

    Without RUN_DIR and without --once, opens the list of runs under --runs-dir.

    \b
    Examples:
      skyrl watch                           # the runs list; Enter opens a run
      skyrl watch runs/sql-20261130-120000  # one run, live
      skyrl watch --once                    # summary of the latest run, then exit
      skyrl watch --once --runs-dir /data/runs
    """
    from skyrl_cli.runs import no_runs
    from tui.reader import is_run_dir, latest_run

    if run_dir is not None and not is_run_dir(run_dir):
        fail(f"{run_dir} is not a run directory (it has no config.yaml or status.json)")
    if once:
        if run_dir is None:
            run_dir = latest_run(runs_dir)
            if run_dir is None:  # nothing to show is no error, as for `skyrl runs`
                typer.echo(no_runs(runs_dir))
                return
        from tui.reader import RunReader
        from tui.summary import summary_text

        typer.echo(summary_text(RunReader(run_dir)))
        return
    from tui.app import WatchApp

    WatchApp(runs_dir=runs_dir, run_dir=run_dir).run()
