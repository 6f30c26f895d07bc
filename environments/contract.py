"""The environment contract, in one place (documented in docs/environments.md).

An environment is a `gymnasium.Env` with text in and out (`TextEnv`). Beyond that API it
may declare the optional attributes of `Extras`; skyrl reads them through `Extras.of`
only, and an environment that declares none gets the defaults below.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import gymnasium as gym

from tasks.task import Task


class TextEnv(Protocol):
    """What skyrl calls: Gymnasium's API, text in and out. `options["task"]` is a `Task` or
    a task file's JSON row (a dict); `info["correct"]` on the last step drives accuracy."""

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]: ...

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]: ...

    def close(self) -> None: ...


@dataclasses.dataclass(frozen=True)
class Extras:
    """The optional attributes of an environment, with the value used when it has none."""

    stop_strings: tuple[str, ...] = ()
    """Generation stops at any of these (the action's closing tags); they stay in the text."""
    system_prompt: str | None = None
    """A system message put before the first observation."""
    response_prefix: str = ""
    """Text every model turn starts with: its tokens are the environment's (loss mask 0),
    and the action the environment sees is this prefix plus what the model wrote."""
    grammar: str | None = None
    """One line describing the action tags, shown by `skyrl envs`."""
    report_by: tuple[str, ...] = ()
    """Task metadata keys evaluation reports break accuracy down by."""
    demonstration: Callable[[Task], str | Sequence[str] | None] | None = None
    """`demonstration(task)`: what a model turn that answers `task` correctly writes (after
    `response_prefix`), for the supervised warm-up; None when it cannot write one. A list
    of such turns is a multi-turn demonstration (say, a search, then the answer): the
    warm-up replays it through the environment after `reset` on the task, so the
    observations between the turns are the environment's own, and keeps it only when the
    last turn ends the episode with a positive reward."""

    @classmethod
    def of(cls, env: Any) -> Extras:
        """The extras `env` declares (an environment, wrapped or not, or its class)."""
        if isinstance(env, gym.Env):
            env = env.unwrapped
        found = {f.name: getattr(env, f.name, None) for f in dataclasses.fields(cls)}
        extras = {k: v for k, v in found.items() if v is not None}
        for key in ("stop_strings", "report_by"):
            if key in extras:
                extras[key] = tuple(extras[key])
        return cls(**extras)
