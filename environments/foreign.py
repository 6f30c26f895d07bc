"""Environments from the ecosystem behind skyrl's contract: `--env skyrl_gym:<name>` runs any
SkyRL-Gym environment (PyPI `skyrl-gym`, the optional extra `skyrl-gym`), and
`--env verifiers:<module>` a `verifiers` (v1) taskset module (the extra `verifiers`); each
package is imported only when such an environment is made.

verifiers: the module's exported `Taskset` is loaded as `verifiers eval` loads it (an
installed package or a module on the path); its tasks are the environment's bundled tasks
(every split is all of them: a taskset has no splits), their prompt the first observation.
An episode is one turn, as verifiers' default single-agent env with a tool-less model:
the action is the model's reply, scored by the task's own `@vf.reward` functions (their
weighted sum is the reward, each kept in `info["rewards"]`). Tasks that need a runtime
(a sandbox, tools, a harness) are not run here.

A SkyRL-Gym environment is built per episode from the task's dataset row, as SkyRL does:
`skyrl_gym.make(name, env_config=..., extras={"reward_spec": ..., "extra_info": ...})`,
then `init(prompt messages)`. Its chat messages become our text: the observation of
`reset` is the prompt's last user message (a system message becomes `system_prompt`), and
a step's observation the joined contents of the messages it returns. `done` ends the
episode (terminated); `max_turns` steps without it truncate it. `info["correct"]` is a
reward of at least 1.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import gymnasium as gym

from environments import text_env
from tasks.task import Task

__all__ = ["SkyRLGymEnv", "VerifiersEnv"]

PREFIX = "SkyRLGym__"
"""`environments.foreign:SkyRLGym__<name>` is SkyRLGymEnv bound to `<name>` (the registry's
entry for `--env skyrl_gym:<name>`, a class like any other for the trainer and Ray)."""

MAX_OBSERVATION_CHARS = 100_000

TEXT_ONLY = frozenset({"aime", "gsm8k", "gsm8k_multi_turn"})
"""SkyRL-Gym environments that only compare the reply's text with the answer. Every other one
(`lcb` exec()s the model's code, `text2sql` runs its SQL on a file the dataset names,
`search`/`searchcode` send its queries over HTTP, a user's own may do anything) acts on this
host, outside skyrl's sandbox, so it runs only when the user says so (`trust_host`)."""


class SkyRLGymEnv(gym.Env):
    """One SkyRL-Gym environment (`name`, as registered with `skyrl_gym`)."""

    env_name = ""
    """The SkyRL-Gym id a bound subclass runs (`__getattr__` below makes them)."""

    def __init__(
        self,
        name: str | None = None,
        max_turns: int = 1,
        env_config: dict[str, Any] | None = None,
        trust_host: bool = False,
        **kwargs: Any,
    ) -> None:
        name = name or self.env_name
        try:
            import skyrl_gym
        except ImportError:
            raise ValueError(
                "--env skyrl_gym:NAME needs the package skyrl-gym: pip install 'skyrl[skyrl-gym]'"
            ) from None
        if name not in skyrl_gym.registry:
            known = ", ".join(sorted(skyrl_gym.registry))
            raise ValueError(f"SkyRL-Gym has no environment {name!r}; known: {known}")
        if name not in TEXT_ONLY and not trust_host:
            raise ValueError(
                f"skyrl_gym:{name} acts on the model's replies on this host, outside skyrl's "
                "sandbox; run it only if you accept that, with --set env.kwargs.trust_host=true"
            )
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


@functools.cache
def _taskset(module: str) -> tuple[Any, ...]:
    """The tasks of a verifiers taskset module, loaded once per process."""
    try:
        import verifiers.v1 as vf
        from verifiers.v1.utils.loaders import taskset_class
    except ImportError:
        raise ValueError(
            "--env verifiers:MODULE needs the package verifiers: pip install 'skyrl[verifiers]'"
        ) from None
    try:
        cls = taskset_class(module)
    except (ImportError, AttributeError, TypeError) as e:
        raise ValueError(f"verifiers taskset {module!r} does not load: {e}") from None
    return tuple(cls(vf.TasksetConfig(id=module)))


def _messages(prompt: Any) -> str | list[dict[str, str]]:
    if prompt is None or isinstance(prompt, str):
        return prompt or ""
    return [
        {"role": str(getattr(m, "role", "user")), "content": str(getattr(m, "content", ""))}
        for m in prompt
    ]


def verifiers_suite(module: str, split: str | None = None) -> list[Task]:
    """The taskset's tasks as Tasks of env `verifiers:<module>` (every split: all of them)."""
    return [
        Task(
            id=str(t.data.id or f"{module}-{i}"),
            env=f"verifiers:{module}",
            prompt=_messages(t.data.prompt),
            metadata={"verifiers_index": i},
        )
        for i, t in enumerate(_taskset(module))
    ]


class VerifiersEnv(gym.Env):
    """One-turn episodes of a verifiers taskset (`module`), scored by its tasks' rewards."""

    module = ""
    """The taskset module a bound subclass runs (`__getattr__` below makes them)."""

    def __init__(self, module: str | None = None, max_turns: int = 1, **kwargs: Any) -> None:
        self.module = module or self.module
        self.tasks = _taskset(self.module)
        self.max_turns = text_env.turn_limit(max_turns)
        self.observation_space, self.action_space = text_env.text_spaces(MAX_OBSERVATION_CHARS)
        self.system_prompt: str | None = None
        self._task: Any = None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        task = text_env.episode_task(self, options, lambda: verifiers_suite(self.module))
        index = task.metadata.get("verifiers_index")
        if not isinstance(index, int) or not 0 <= index < len(self.tasks):
            raise ValueError(f"task {task.id!r} names no task of verifiers:{self.module}")
        self._task = self.tasks[index]
        self.system_prompt = self._task.data.system_prompt
        prompt = _messages(self._task.data.prompt)
        text = prompt if isinstance(prompt, str) else (prompt[-1]["content"] if prompt else "")
        return text[:MAX_OBSERVATION_CHARS], {"task_id": task.id, "turns_left": 1}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._task is None:
            raise RuntimeError("reset() first (or the episode is over)")
        from verifiers.v1 import trace as vtrace
        from verifiers.v1 import types
        from verifiers.v1.configs.agent import AgentConfig
        from verifiers.v1.graph import MessageNode

        task, self._task = self._task, None
        prompt = task.data.prompt_text
        trace = vtrace.Trace(
            task=vtrace.TraceTask(type=type(task).__name__, data=task.data),
            agent=vtrace.AgentInfo(config=AgentConfig()),
            nodes=[
                MessageNode(message=types.UserMessage(content=prompt)),
                MessageNode(
                    parent=0, message=types.AssistantMessage(content=str(action)), sampled=True
                ),
            ],
        )
        asyncio.run(task.score(trace))
        rewards = {k: r.value for k, r in trace.rewards.items() if r is not None}
        reward = float(trace.reward)
        info = {"turns_left": 0, "correct": reward >= 1.0, "rewards": rewards}
        return "", reward, True, False, info


_BOUND: dict[str, tuple[type, str]] = {"SkyRLGym__": (SkyRLGymEnv, "env_name")}
_BOUND["Verifiers__"] = (VerifiersEnv, "module")


def __getattr__(attr: str) -> Any:
    """`SkyRLGym__<name>` / `Verifiers__<module>`: the adapter bound to one foreign
    environment (a class like any other for the trainer and Ray); `suite__<module>`: the
    bundled tasks of `verifiers:<module>`."""
    if attr.startswith("suite__"):
        return functools.partial(verifiers_suite, attr.removeprefix("suite__"))
    prefix = next((p for p in _BOUND if attr.startswith(p) and attr != p), None)
    if prefix is None:
        raise AttributeError(attr)
    base, field = _BOUND[prefix]
    cls = type(attr, (base,), {field: attr.removeprefix(prefix)})
    cls.__module__ = __name__
    globals()[attr] = cls
    return cls
