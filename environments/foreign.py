"""Environments from the ecosystem behind skyrl's contract: `--env skyrl_gym:<name>` runs any
SkyRL-Gym environment (PyPI `skyrl-gym`, the optional extra `skyrl-gym`), imported only
when such an environment is made.

A SkyRL-Gym environment is built per episode from the task's dataset row, as SkyRL does:
`skyrl_gym.make(name, env_config=..., extras={"reward_spec": ..., "extra_info": ...})`,
then `init(prompt messages)`. Its chat messages become our text: the observation of
`reset` is the prompt's last user message (a system message becomes `system_prompt`), and
a step's observation the joined contents of the messages it returns. `done` ends the
episode (terminated); `max_turns` steps without it truncate it. `info["correct"]` is a
reward of at least 1.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from environments import text_env
from tasks.task import Task

__all__ = ["SkyRLGymEnv"]

PREFIX = "SkyRLGym__"
"""`environments.foreign:SkyRLGym__<name>` is SkyRLGymEnv bound to `<name>` (the registry's
entry for `--env skyrl_gym:<name>`, a class like any other for the trainer and Ray)."""

MAX_OBSERVATION_CHARS = 100_000


class SkyRLGymEnv(gym.Env):
    """One SkyRL-Gym environment (`name`, as registered with `skyrl_gym`)."""

    env_name = ""
    """The SkyRL-Gym id a bound subclass runs (`__getattr__` below makes them)."""

    def __init__(
        self,
        name: str | None = None,
        max_turns: int = 1,
        env_config: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        try:
            import skyrl_gym
        except ImportError:
            raise ValueError(
                "--env skyrl_gym:NAME needs the package skyrl-gym: pip install 'skyrl[skyrl-gym]'"
            ) from None
        name = name or self.env_name
        if name not in skyrl_gym.registry:
            known = ", ".join(sorted(skyrl_gym.registry))
            raise ValueError(f"SkyRL-Gym has no environment {name!r}; known: {known}")
        self.name = name
        self.max_turns = text_env.turn_limit(max_turns)
        self.env_config = env_config or {}
        self.observation_space, self.action_space = text_env.text_spaces(MAX_OBSERVATION_CHARS)
        self.system_prompt: str | None = None
        self._env: Any = None
        self._turns_left = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        import skyrl_gym

        if not options or "task" not in options:
            raise ValueError(f"skyrl_gym:{self.name} has no bundled tasks: pass --tasks FILE")
        task = options["task"]
        task = task if isinstance(task, Task) else Task.from_dict(task)
        extras = {k: v for k, v in task.metadata.items() if k in ("reward_spec", "extra_info")}
        extras.setdefault("reward_spec", {"method": "rule", "ground_truth": task.answer})
        extras.setdefault("extra_info", {})
        self.close()
        self._env = skyrl_gym.make(self.name, env_config=self.env_config, extras=extras)
        messages = (
            task.prompt
            if isinstance(task.prompt, list)
            else [{"role": "user", "content": task.prompt}]
        )
        conversation, _ = self._env.init(messages)
        system = [m["content"] for m in conversation if m.get("role") == "system"]
        self.system_prompt = system[0] if system else None
        users = [m["content"] for m in conversation if m.get("role") != "system"]
        self._turns_left = self.max_turns
        observation = (users[-1] if users else "")[:MAX_OBSERVATION_CHARS]
        return observation, {"task_id": task.id, "turns_left": self._turns_left}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._env is None:
            raise RuntimeError("reset() first (or the episode is over)")
        out = self._env.step(str(action))
        self._turns_left -= 1
        reward = float(out.get("reward") or 0.0)
        done = bool(out.get("done"))
        truncated = not done and self._turns_left <= 0
        text = "\n".join(str(m.get("content", "")) for m in out.get("observations") or [])
        info: dict[str, Any] = {"turns_left": self._turns_left, "correct": reward >= 1.0}
        info["metadata"] = dict(out.get("metadata") or {})
        if done or truncated:
            self.close()
        return text[:MAX_OBSERVATION_CHARS], reward, done, truncated, info

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
        self._env = None


def __getattr__(attr: str) -> type[SkyRLGymEnv]:
    """`SkyRLGym__<name>`: a subclass of SkyRLGymEnv bound to the SkyRL-Gym id `<name>`."""
    if not attr.startswith(PREFIX) or attr == PREFIX:
        raise AttributeError(attr)
    cls = type(attr, (SkyRLGymEnv,), {"env_name": attr.removeprefix(PREFIX)})
    cls.__module__ = __name__
    globals()[attr] = cls
    return cls
