"""The environment registry: a literal table of built-ins, plus user plugins.

A built-in's row owns it: its class, its bundled suite and the run preset `--env NAME`
starts from; its action grammar and the parameters `env.kwargs` may name are read from the
class (`EnvSpec.grammar`, `EnvSpec.check`), which train, eval and `skyrl envs` all call.

A plugin is named either in `skyrl.yaml` (`environments: {my_env: "my_pkg.envs:MyEnv"}` or
`"path/to/file.py:MyEnv"`) or published through the `skyrl.environments` entry-point group.
An unknown name fails with the list of known ones.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym

from environments.contract import Extras
from tasks.task import Task


@dataclass(frozen=True)
class EnvSpec:
    """One environment: its class, its bundled tasks and the run defaults it brings.

    What the class itself says is read from it, not repeated here: its action grammar (the
    `grammar` attribute) and its constructor's parameters (which `env.kwargs` must name).
    A built-in is therefore its module, its task suite and one row of `BUILTINS`.
    """

    name: str
    """Short name used on the command line (`--env sql`)."""
    entry: str
    """`module:Class` (or `file.py:Class`) of the gymnasium.Env subclass."""
    gym_id: str | None = None
    """Gymnasium id for built-ins (`skyrl/SQL-v0`)."""
    suite: str | None = None
    """`module:function(split) -> list[Task]` returning bundled tasks, if any."""
    preset: Mapping[str, Any] = field(default_factory=dict)
    """Run settings `skyrl train --env NAME` starts from, under everything the user sets:
    config sections of plain values (`{"rollout": {"group_size": 6}}`), merged by
    `trainers.config.build_config`. An `algorithm` section applies only while the run keeps
    the algorithm it names."""

    def load(self, base_dir: Path | None = None) -> type[gym.Env]:
        """The class; ValueError (one sentence) when its module does not load (syntax,
        import) or lacks the class."""
        try:
            return load_class(self.entry, base_dir)
        except ValueError:
            raise
        except Exception as e:  # noqa: BLE001 - the module's own error, as one line
            raise ValueError(
                f"cannot load environment {self.name!r} ({self.entry}): {_one_line(e)}"
            ) from None

    def grammar(self, base_dir: Path | None = None) -> str:
        """One line on the action tags, shown by `skyrl envs`: the class's `grammar`
        attribute, else the first line of its docstring."""
        cls = self.load(base_dir)
        grammar = Extras.of(cls).grammar
        if isinstance(grammar, str) and grammar:
            return grammar
        doc = (cls.__doc__ or "").strip().splitlines()
        return doc[0] if doc else "(no description)"

    def check(self, kwargs: Mapping[str, Any], base_dir: Path | None = None) -> type[gym.Env]:
        """The class, once `kwargs` (a run's `env.kwargs`) are known to be named parameters
        of its constructor; ValueError (one sentence) otherwise. A catch-all **kwargs does
        not count: built-ins take one and ignore what lands in it."""
        cls = self.load(base_dir)
        if "max_turns" in kwargs:
            raise ValueError("set env.max_turns, not env.kwargs.max_turns")
        try:
            params = inspect.signature(cls.__init__).parameters.values()
        except (TypeError, ValueError):
            return cls  # no readable signature (a C extension): let the constructor judge
        named = [
            p.name
            for p in params
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
            and p.name not in ("self", "max_turns")
        ]
        unknown = sorted(set(kwargs) - set(named))
        if unknown:
            raise ValueError(
                f"env.kwargs.{unknown[0]} is no parameter of {self.entry}; it takes: "
                f"{', '.join(named) or 'none'}"
            )
        return cls

    def build(
        self, max_turns: int, kwargs: Mapping[str, Any], base_dir: Path | None = None
    ) -> gym.Env:
        """One environment as a run builds it, `kwargs` checked first (`check`); ValueError
        (one sentence) when the constructor refuses them."""
        cls: Any = self.check(kwargs, base_dir)
        try:
            return cls(max_turns=max_turns, **kwargs)
        except Exception as e:  # noqa: BLE001 - the constructor's own complaint, as one line
            reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise ValueError(f"env {self.name!r} refuses env.kwargs: {reason}") from None


def _one_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}".rstrip(": ")


BUILTINS: dict[str, EnvSpec] = {
    spec.name: spec
    for spec in [
        EnvSpec(
            "sql",
            "environments.sql:SQLEnv",
            "skyrl/SQL-v0",
            "tasks.sql:load_suite",
            # Sized for a 2-core CPU (about 20 minutes with smollm2-135m, warm-up included).
            # SmolLM2-135M almost never answers right on its own (measured: 1 exact match in
            # 240 samples), so RL alone has nothing to compare. A short supervised warm-up on
            # the train split's gold queries gives it answers to improve on; each turn opens
            # the answer tag, and a wrong answer that runs earns 0.3 x the F1 of its query parts.
            preset={
                "env": {
                    "max_turns": 2,
                    "kwargs": {"response_prefix": "<solution>", "partial_credit": 0.3},
                },
                "rollout": {
                    "batch_size": 3,
                    "group_size": 6,
                    "max_new_tokens": 48,
                    "temperature": 0.8,
                },
                # DAPO (clip-higher, dynamic sampling, a soft overlong penalty over the last 16
                # of 48 tokens): over 5 seeds from the same warm-up checkpoints its RL phase
                # moved dev accuracy by +3.5 +- 4.2 points against GRPO's +2.1 +- 4.5
                # (docs/learning.md)
                "algorithm": {"name": "dapo", "overlong_buffer": 16, "overlong_penalty": 0.5},
                "optim": {"lr": 1e-5},
                "warmup": {"sft_steps": 24, "batch_size": 8},
                "trainer": {"max_steps": 30, "checkpoint_every": 10},
                "eval": {"limit": 48},
            },
        ),
        EnvSpec(
            "search",
            "environments.search:SearchEnv",
            "skyrl/Search-v0",
            "tasks.search:load_suite",
            preset={
                "env": {"max_turns": 4, "kwargs": {"reward": "f1"}},
                "rollout": {"batch_size": 4, "group_size": 4, "max_new_tokens": 48},
                "optim": {"lr": 1e-5},
                "trainer": {"max_steps": 30},
                "eval": {"limit": 40},
            },
        ),
        EnvSpec(
            "python",
            "environments.python:PythonEnv",
            "skyrl/Python-v0",
            "tasks.python_tasks:load_suite",
            preset={
                "env": {"max_turns": 4},
                "rollout": {"batch_size": 4, "group_size": 4, "max_new_tokens": 96},
                "optim": {"lr": 1e-5},
                "trainer": {"max_steps": 30},
                "eval": {"limit": 40},
            },
        ),
        EnvSpec(
            "shell",
            "environments.shell:ShellEnv",
            "skyrl/Shell-v0",
            "tasks.harbor:load_suite",
            preset={
                # Harbor tasks need a few commands each; observations can be long
                "env": {"max_turns": 8},
                "rollout": {
                    "batch_size": 2,
                    "group_size": 4,
                    "max_new_tokens": 128,
                    "max_total_tokens": 4096,
                },
                "optim": {"lr": 1e-5},
                "trainer": {"max_steps": 20},
                "eval": {"limit": 2},
            },
        ),
        EnvSpec("swe", "environments.swe:SWEEnv", "skyrl/SWE-v0", "environments.swe:load_suite"),
        EnvSpec(
            "math",
            "environments.math:MathEnv",
            "skyrl/Math-v0",
            "tasks.math:load_suite",
            preset={
                "env": {"max_turns": 1},
                "rollout": {"batch_size": 8, "group_size": 4, "max_new_tokens": 32},
                "optim": {"lr": 1e-5},
                "trainer": {"max_steps": 20},
                "eval": {"limit": 50},
            },
        ),
    ]
}
"""The built-ins, one row each: name, `module:Class`, Gymnasium id, bundled suite, preset."""


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
        specs[ep.name] = EnvSpec(name=ep.name, entry=ep.value)
    for name, entry in (declared or {}).items():
        specs[name] = EnvSpec(name=name, entry=entry)
    return specs


def known_envs(declared: dict[str, str] | None = None) -> dict[str, EnvSpec]:
    return {**BUILTINS, **plugin_specs(declared)}


FOREIGN = {
    "skyrl_gym": "environments.foreign:SkyRLGym__",
    "verifiers": "environments.foreign:Verifiers__",
}
"""`--env PREFIX:NAME`: an environment of another package (SkyRL-Gym, verifiers) through a
built-in adapter."""


def resolve(name: str, declared: dict[str, str] | None = None) -> EnvSpec:
    """Find an environment by name; ValueError lists the known names."""
    prefix, _, foreign = name.partition(":")
    if prefix in FOREIGN and foreign:
        suite = f"environments.foreign:suite__{foreign}" if prefix == "verifiers" else None
        return EnvSpec(name, FOREIGN[prefix] + foreign, suite=suite)
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
