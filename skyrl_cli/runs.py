"""`skyrl runs`: list runs under the runs dir with their state, reading only the run files."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

from skyrl_cli.style import console
from tui.reader import list_runs  # one reader of run directories, shared with the watch UI


def runs(
    runs_dir: Annotated[
        Path, typer.Option("--runs-dir", help="Folder holding run directories.")
    ] = Path("runs"),
    as_json: Annotated[
        bool, typer.Option("--json", help="Print JSON lines instead of a table.")
    ] = False,
) -> None:
    """List runs: id, env, model, state, step, last reward.

    \b
    Examples:
      skyrl runs
      skyrl runs --runs-dir /data/runs --json
    """
    rows = []
    for summary in list_runs(runs_dir):
        row = asdict(summary)
        del row["path"]
        rows.append(row)
    if as_json:
        for r in rows:
            print(json.dumps(r))
        return
    if not rows:
        print(no_runs(runs_dir))
        return
    from rich.table import Table
    from rich.text import Text

    table = Table(box=None)
    # the id is what users copy into --resume and watch: never shorten it
    table.add_column("id", no_wrap=True, min_width=max(len(r["id"]) for r in rows))
    for name in ("env", "model", "state", "step", "last reward", "eval"):
        table.add_column(name, no_wrap=True)
    colors = {
        "running": "green",
        "finished": "blue",
        "failed": "red",
        "stale": "yellow",
        "stopped": "yellow",
    }
    for r in rows:
        reward = "-" if r["last_reward"] is None else f"{r['last_reward']:+.3f}"
        # Text, not markup: a run's fields are data ("[link=...]" would become a hyperlink).
        table.add_row(
            Text(r["id"]),
            Text(r["env"]),
            Text(r["model"]),
            Text(r["state"], style=colors.get(r["state"], "white")),
            f"{r['step']}/{r['max_steps'] or '?'}",
            reward,
            Text(r["last_eval"] or "-"),
        )
    # piped (scripts, CI logs): never truncate; a terminal gets a table that fits it
    console(width=None if sys.stdout.isatty() else 1000).print(table)


def no_runs(runs_dir: Path) -> str:
    """What `skyrl runs` and `skyrl watch --once` say (exit 0) when there is nothing to show."""
    return f"no runs in {runs_dir}/ yet; start one with: skyrl train --env sql"
