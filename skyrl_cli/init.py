"""`skyrl init`: scaffold a project folder that trains without edits."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Annotated, Any

import typer

from skyrl_cli.errors import fail

TEMPLATE = Path(__file__).parent / "templates" / "project"
REAL_MODEL = """
  # `tiny` is a random model that proves the project runs (about a minute on 2 CPU cores);
  # it learns nothing. A real model learns, slowly on a CPU (2 steps of this template on
  # smollm2-135m took 28 minutes on 2 cores); use a GPU, or a smaller rollout budget:
  # name: smollm2-135m
  name: tiny
"""


def commented_yaml(cfg: Any) -> str:
    """The config as YAML with each field's docstring above it (the schema is the manual)."""
    import yaml
    from pydantic import BaseModel

    lines = [
        "# skyrl run configuration. `skyrl train` reads ./skyrl.yaml when present;",
        "# flags and --set key=value override it. Unknown keys are errors.",
        "",
    ]

    def emit(model: BaseModel, indent: int) -> None:
        pad = "  " * indent
        for attr, field in type(model).model_fields.items():
            if attr == "project_dir":
                continue
            value, name = getattr(model, attr), field.alias or attr  # `async` is async_
            doc = (field.description or "").strip()
            for doc_line in doc.splitlines():
                lines.append(f"{pad}# {doc_line.strip()}")
            if isinstance(value, BaseModel):
                lines.append(f"{pad}{name}:")
                emit(value, indent + 1)
                lines.append("")
            else:
                dumped = yaml.safe_dump(
                    {name: _plain(value)}, default_flow_style=False, sort_keys=False
                ).rstrip()
                lines.extend(pad + ln for ln in dumped.splitlines())

    emit(cfg, 0)
    return "\n".join(lines) + "\n"


def _plain(v: Any) -> Any:
    return list(v) if isinstance(v, tuple) else v


def init(
    path: Annotated[Path, typer.Argument(help="Folder to create.")],
    env: Annotated[
        str,
        typer.Option(
            "--env", help="Environment skyrl.yaml trains: my_env (the template) or a built-in."
        ),
    ] = "my_env",
    force: Annotated[
        bool, typer.Option("--force", help="Write into an existing non-empty folder.")
    ] = False,
) -> None:
    """Create a project: skyrl.yaml (every field commented), a working custom environment,
    sample tasks and a README.

    \b
    Examples:
      skyrl init my-agent
      skyrl init sql-agent --env sql
      skyrl init .                   # in the current (empty) folder
      cd my-agent && skyrl train     # the first run: about a minute on a CPU
    """
    from environments.registry import BUILTINS
    from trainers.config import build_config

    if path.exists() and any(path.iterdir()) and not force:
        fail(f"{path} already exists and is not empty; pick a new folder or pass --force")
    if env != "my_env" and env not in BUILTINS:
        fail(
            f"unknown environment {env!r}; choose my_env (the template) or one of: {', '.join(BUILTINS)}"
        )
    path.mkdir(parents=True, exist_ok=True)
    for name in ("my_env.py", "tasks.jsonl"):
        shutil.copy(TEMPLATE / name, path / name)
    title = path.resolve().name  # `skyrl init .` names the project after the folder
    readme = (TEMPLATE / "README.md").read_text(encoding="utf-8").replace("{name}", title)
    (path / "README.md").write_text(readme, encoding="utf-8")
    if env == "my_env":
        layer = {
            "model": {"name": "tiny"},  # the first run takes about a minute on a CPU
            "env": {"name": "my_env", "tasks": "tasks.jsonl", "max_turns": 2},
            "environments": {"my_env": "my_env.py:UnitsEnv"},
            "rollout": {"batch_size": 4, "group_size": 4, "max_new_tokens": 32, "temperature": 0.7},
            "trainer": {"max_steps": 10},  # the first run: about a minute on 2 cores
            "eval": {"limit": 8},
        }
        cfg = build_config([layer])
    else:
        cfg = build_config([], env_name=env)
    text = commented_yaml(cfg)
    if env == "my_env":  # where the template's first run ends: the line to change for real
        text = text.replace("\n  name: tiny\n", REAL_MODEL, 1)
    (path / "skyrl.yaml").write_text(text, encoding="utf-8")
    print(f"created {path}/ (skyrl.yaml, my_env.py, tasks.jsonl, README.md)")
    here = path.resolve() == Path.cwd().resolve()
    print("next: skyrl train" if here else f"next: cd {path} && skyrl train")
