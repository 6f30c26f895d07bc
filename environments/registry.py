"""The environment registry: a literal table of built-ins, plus user plugins.

A plugin is named either in `skyrl.yaml` (`environments: {my_env: "my_pkg.envs:MyEnv"}` or
`"path/to/file.py:MyEnv"`) or published through the `skyrl.environments` entry-point group.
An unknown name fails with the list of known ones.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym

from tasks.task import Task


@dataclass(frozen=True)
class EnvSpec:
    """How to build one environment and where its bundled tasks come from."""

    name: str
    """Short name used on the command line (`--env sql`)."""
    entry: str
    """`module:Class` (or `file.py:Class`) of the gymnasium.Env subclass."""
    grammar: str
    """One line describing the action tags, shown by `skyrl envs` and in errors."""
    gym_id: str | None = None
    """Gymnasium id for built-ins (`skyrl/SQL-v0`)."""
    suite: str | None = None
    """`module:function(split) -> list[Task]` returning bundled tasks, if any."""


_GRAMMARS = {
    "sql": "<sql>query</sql> runs a read-only query; <solution>query</solution> answers",
    "search": "<search>query</search> shows the top-k passages; <answer>text</answer> answers",
    "python": "<python>code</python> runs in a sandboxed persistent REPL; <answer>…</answer> answers",
    "shell": "<bash>command</bash> runs in a sandboxed persistent shell; <submit/> runs the task's tests",
    "swe": "<bash>command</bash> runs in the checked-out repo; <submit/> grades its git diff",
    "math": "<answer>number</answer> answers",
}
BUILTINS: dict[str, EnvSpec] = {
    name: EnvSpec(name, f"environments.{entry}", _GRAMMARS[name], f"skyrl/{gym_id}-v0", suite)
    for name, entry, gym_id, suite in [
        ("sql", "sql:SQLEnv", "SQL", "tasks.sql:load_suite"),
        ("search", "search:SearchEnv", "Search", "tasks.search:load_suite"),
        ("python", "python:PythonEnv", "Python", "tasks.python_tasks:load_suite"),
        ("shell", "shell:ShellEnv", "Shell", "tasks.harbor:load_suite"),
        ("swe", "swe:SWEEnv", "SWE", "environments.swe:load_suite"),
        ("math", "math:MathEnv", "Math", "tasks.math:load_suite"),
    ]
}
"""The built-ins: name, `module:Class`, action grammar, Gymnasium id, bundled suite."""


def _register_gym_ids() -> None:
    for spec in BUILTINS.values():
        if spec.gym_id and spec.gym_id not in gym.registry:
            gym.register(id=spec.gym_id, entry_point=spec.entry)


_register_gym_ids()


def plugin_specs(declared: dict[str, str] | None = None) -> dict[str, EnvSpec]:
    """Plugins from the `skyrl.environments` entry-point group and from skyrl.yaml."""
    from importlib.metadata import entry_points

    specs: dict[str, EnvSpec] = {}
    for ep in entry_points(group="skyrl.environments"):
        specs[ep.name] = EnvSpec(name=ep.name, entry=ep.value, grammar="(plugin)")
    for name, entry in (declared or {}).items():
        specs[name] = EnvSpec(name=name, entry=entry, grammar="(plugin)")
    return specs


def known_envs(declared: dict[str, str] | None = None) -> dict[str, EnvSpec]:
    return {**BUILTINS, **plugin_specs(declared)}


FOREIGN = {
    "skyrl_gym": ("environments.foreign:SkyRLGym__", "SkyRL-Gym"),
    "verifiers": ("environments.foreign:Verifiers__", "verifiers"),
}
"""`--env PREFIX:NAME`: an environment of another package through a built-in adapter."""


def resolve(name: str, declared: dict[str, str] | None = None) -> EnvSpec:
    """Find an environment by name; ValueError lists the known names."""
    prefix, _, foreign = name.partition(":")
    if prefix in FOREIGN and foreign:
        entry, package = FOREIGN[prefix]
        suite = f"environments.foreign:suite__{foreign}" if prefix == "verifiers" else None
        return EnvSpec(name, entry + foreign, f"({package} environment {foreign})", suite=suite)
    specs = known_envs(declared)
    if name not in specs:
        hint = (
            ""
            if declared
            else "; a project's own environments are named in its skyrl.yaml "
            "(environments: {NAME: file.py:Class}): run from the project folder or pass --config"
        )
        known = ", ".join([*sorted(specs), *(f"{p}:NAME" for p in FOREIGN)])
        raise ValueError(f"unknown environment {name!r}; known: {known}{hint}")
    return specs[name]


def load_class(entry: str, base_dir: Path | None = None) -> type[gym.Env]:
    """Import `module:Class` or `path/to/file.py:Class` (relative to base_dir)."""
    if ":" not in entry:
        raise ValueError(
            f"environment entry {entry!r} must look like 'module:Class' or 'file.py:Class'"
        )
    module_name, _, class_name = entry.rpartition(":")
    if module_name.endswith(".py"):
        path = Path(module_name)
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        if not path.exists():
            raise ValueError(f"environment file {path} does not exist")
        spec = importlib.util.spec_from_file_location(f"skyrl_plugin_{path.stem}", path)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    else:
        if base_dir is not None and str(base_dir) not in sys.path:
            sys.path.insert(0, str(base_dir))
        try:
            module = importlib.import_module(module_name)
        except ImportError as e:
            raise ValueError(f"cannot import environment module {module_name!r} ({e})") from None
    cls = getattr(module, class_name, None)
    if cls is None:
        raise ValueError(f"module {module_name!r} has no class {class_name!r}")
    return cls


def make_env(spec: EnvSpec, base_dir: Path | None = None, **kwargs: Any) -> gym.Env:
    return load_class(spec.entry, base_dir)(**kwargs)


def bundled_tasks(spec: EnvSpec, split: str | None) -> list[Task]:
    """The environment's bundled tasks for a split; ValueError when it ships none."""
    if spec.suite is None:
        raise ValueError(
            f"environment {spec.name!r} has no bundled tasks; pass --tasks FILE (a JSONL task file)"
        )
    module_name, _, fn = spec.suite.partition(":")
    return getattr(importlib.import_module(module_name), fn)(split)
