"""`skyrl envs`: the environments `skyrl train --env NAME` accepts, with their action grammar."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from skyrl_cli.errors import fail


def envs(
    config: Annotated[
        Path | None,
        typer.Option("--config", help="Project config naming plugins (default: ./skyrl.yaml)."),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print JSON lines instead of a table.")
    ] = False,
) -> None:
    """List built-in environments and plugins (skyrl.yaml and the skyrl.environments entry points).

    \b
    Examples:
      skyrl envs
      skyrl envs --config my-agent/skyrl.yaml
      skyrl envs --json
    """
    from environments import registry
    from trainers.config import ConfigError, read_yaml

    if config is None and Path("skyrl.yaml").exists():
        config = Path("skyrl.yaml")
    declared: dict[str, str] = {}
    base = Path.cwd()
    if config is not None:
        try:
            declared = read_yaml(config).get("environments") or {}
        except ConfigError as e:
            fail(str(e))
        if not isinstance(declared, dict):
            fail(f"{config}: 'environments' must map names to 'module:Class' or 'file.py:Class'")
        base = config.resolve().parent
    rows = []
    for name, spec in registry.known_envs(declared).items():
        builtin = name in registry.BUILTINS
        rows.append(
            {
                "name": name,
                "kind": "built-in" if builtin else "plugin",
                "id": spec.gym_id or spec.entry,
                "grammar": _grammar(spec, None if builtin else base),
                "bundled_tasks": spec.suite is not None,
            }
        )
    if as_json:
        for r in rows:
            print(json.dumps(r))
        return
    from rich.table import Table

    from skyrl_cli.style import console

    table = Table("name", "kind", "id / entry", "actions", box=None)
    for r in rows:
        table.add_row(str(r["name"]), str(r["kind"]), str(r["id"]), str(r["grammar"]))
    console().print(table)
    print("\ntrain one: skyrl train --env NAME   (plugins: --tasks FILE for your own tasks)")


def _grammar(spec: Any, base: Path | None) -> str:
    """The row's action grammar (`EnvSpec.grammar`); a plugin that does not load is listed
    with why, not fatal."""
    try:
        return spec.grammar(base)
    except Exception as e:  # noqa: BLE001 - a broken plugin is listed with why, not fatal
        return f"(cannot load: {e})"
