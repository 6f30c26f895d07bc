"""`skyrl runs`: list runs under the runs dir with their state, reading only the run files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from tui.reader import run_state  # one "is this run alive" rule, shared with the watch UI


def read_run(path: Path) -> dict[str, Any]:
    import yaml

    status = (
        json.loads((path / "status.json").read_text()) if (path / "status.json").exists() else {}
    )
    cfg = (
        yaml.safe_load((path / "config.yaml").read_text())
        if (path / "config.yaml").exists()
        else {}
    )
    return {
        "id": path.name,
        "env": (cfg.get("env") or {}).get("name", "?"),
        "model": (cfg.get("model") or {}).get("name", "?"),
        "state": run_state(status),
        "step": status.get("step", 0),
        "max_steps": (cfg.get("trainer") or {}).get("max_steps", "?"),
        "last_reward": status.get("last_reward"),
        "error": status.get("error"),
    }


def list_runs(runs_dir: Path) -> list[dict[str, Any]]:
    if not runs_dir.is_dir():
        return []
    dirs = [p for p in runs_dir.iterdir() if (p / "config.yaml").exists()]
    return [read_run(p) for p in sorted(dirs, key=lambda p: p.stat().st_mtime)]


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
    rows = list_runs(runs_dir)
    if as_json:
        for r in rows:
            print(json.dumps(r))
        return
    if not rows:
        print(f"no runs in {runs_dir}/ yet; start one with: skyrl train --env sql")
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("id", "env", "model", "state", "step", "last reward", box=None)
    colors = {
        "running": "green",
        "finished": "blue",
        "failed": "red",
        "stale": "yellow",
        "stopped": "yellow",
    }
    for r in rows:
        reward = "-" if r["last_reward"] is None else f"{r['last_reward']:+.3f}"
        state = f"[{colors.get(r['state'], 'white')}]{r['state']}[/]"
        table.add_row(r["id"], r["env"], r["model"], state, f"{r['step']}/{r['max_steps']}", reward)
    Console().print(table)
