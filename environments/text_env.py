"""What every built-in text environment shares, so that an environment file holds only its
task source, its parser and its reward (as a `verifiers` environment does).

- `Tags`: the action grammar's tag rule and the stop strings that go with it.
- `read_action`: the model's action as clean text, or an ActionError.
- `turn_limit`, `in_range`, `one_of`, `text_spaces`, `sandbox_limits`: the checked turn
  budget and knobs, the text spaces and a sandbox's limits with the `timeout_s` knob, for
  `__init__`.
- `episode_task`: the task of `reset(options={"task": ...})`, a `Task` or a task file's
  JSON row, else one drawn from the bundled train suite.
- `tag_step`: Gymnasium's `step(action)` from an environment's `step(self, parsed)`: the
  episode-over guard, the turn spent, the action read and parsed, a malformed one answered.
- The turn budget: `turns_note` ("Turns left: N"), `next_turn`, `out_of_turns` (the format
  penalty of an episode that never answered), `episode_over` (a step after the end) and
  `graded` (the end of a `<submit/>` episode).
- `tag_demonstration`: the reference answer in its tag, for the supervised warm-up.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

import gymnasium as gym

from environments.sandbox import Limits
from environments.spaces import ActionError, TextSpace, action_text
from tasks.task import Task

Step = tuple[str, float, bool, bool, dict[str, Any]]
"""What `gymnasium.Env.step` returns: observation, reward, terminated, truncated, info."""
EPISODE_OVER = "the episode is over; call reset() to start a new one"
MAX_ACTION_CHARS = 100_000
"""Longer actions are rejected unread (an LLM turn is a few thousand tokens at most)."""


class Tags:
    """The built-ins' tag rule: the FIRST opening tag in the text is the action (text before
    it is reasoning); it must be closed, non-empty and hold no other tag. A name ending in
    `/` is a lone tag (`submit/` is `<submit/>`), with an empty body."""

    def __init__(self, *names: str) -> None:
        self.names = names
        paired = "|".join(re.escape(n) for n in names if not n.endswith("/"))
        lone = [f"<{re.escape(n)}>" for n in names if n.endswith("/")]
        self._open = re.compile(f"<({'|'.join(re.escape(n) for n in names)})>")
        self._any = re.compile("|".join([f"</?(?:{paired})>", *lone]))
        self.stop_strings = tuple(f"<{n}>" if n.endswith("/") else f"</{n}>" for n in names)
        """Where generation stops: each closing tag, and each lone tag."""

    def parse(self, text: str, *, strip: bool = True) -> tuple[str, str]:
        """(tag, body) of the first tag (body stripped unless `strip=False`; a lone tag's
        name without its `/`); ActionError, whose message is the observation, if malformed."""
        opening = self._open.search(text)
        if opening is None:
            raise ActionError(f"no {' or '.join(f'<{n}>' for n in self.names)} tag found")
        tag = opening.group(1)
        if tag.endswith("/"):
            return tag[:-1], ""
        end = text.find(f"</{tag}>", opening.end())
        if end < 0:
            raise ActionError(f"<{tag}> is not closed with </{tag}>")
        body = text[opening.end() : end]
        if self._any.search(body):
            raise ActionError(f"<{tag}> contains another tag; tags cannot be nested")
        if not body.strip():
            raise ActionError(f"<{tag}></{tag}> is empty")
        return tag, body.strip() if strip else body


def turn_limit(max_turns: int) -> int:
    """`max_turns` (turns per episode, the answer included); ValueError below 1."""
    if max_turns < 1:
        raise ValueError(f"max_turns must be at least 1, got {max_turns}")
    return max_turns


V = TypeVar("V", bound=float | None)
K = TypeVar("K", bound=str | None)


def in_range(name: str, value: V, low: float, high: float) -> V:
    """A numeric knob, checked: `value` (None passes); ValueError when outside [low, high]."""
    if value is not None and not low <= value <= high:
        raise ValueError(f"{name} must be between {low:g} and {high:g}, got {value}")
    return value


def one_of(name: str, value: K, known: Sequence[str]) -> K:
    """A named-choice knob, checked: `value` (None passes); ValueError listing `known`."""
    if value is not None and value not in known:
        raise ValueError(f"unknown {name} {value!r}; known: {', '.join(known)}")
    return value


def text_spaces(max_observation_chars: int) -> tuple[TextSpace, TextSpace]:
    """The observation and action spaces of a text environment: any text up to
    `max_observation_chars`, and up to `MAX_ACTION_CHARS`."""
    return TextSpace(max_observation_chars), TextSpace(MAX_ACTION_CHARS)


def sandbox_limits(limits: Limits | None, timeout_s: float | None) -> Limits:
    """`limits` (default `Limits()`) with `timeout_s`, when given, as the per-action clock."""
    limits = limits or Limits()
    return limits if timeout_s is None else dataclasses.replace(limits, timeout_s=float(timeout_s))


def read_action(action: Any, max_chars: int) -> str:
    """The action as clean text (bytes decoded, lone surrogates replaced); ActionError for
    a non-text action or one longer than `max_chars`."""
    return action_text(action, max_chars).encode("utf-8", "replace").decode("utf-8")


@functools.cache
def train_suite(env: str) -> tuple[Task, ...]:
    """The bundled train suite of a built-in (`math`, `sql`...), loaded once per process."""
    from environments.registry import BUILTINS, bundled_tasks

    return tuple(bundled_tasks(BUILTINS[env], "train"))


def episode_task(
    env: gym.Env, options: dict[str, Any] | None, suite: Callable[[], Sequence[Task]]
) -> Task:
    """`options["task"]` (a `Task`, or a task file's JSON row as a dict), else a task drawn
    from `suite()` with the environment's seeded generator."""
    task = (options or {}).get("task")
    if task is None:
        tasks = suite()
        return tasks[int(env.np_random.integers(len(tasks)))]
    if isinstance(task, dict):
        return Task.from_dict(task, where='options["task"]')
    return task


def last_message(task: Task) -> str:
    """The task's prompt text: the string, or the last chat message's content."""
    return task.prompt if isinstance(task.prompt, str) else task.prompt[-1]["content"]


def user_text(task: Task) -> str:
    """The task's prompt text: the string, or every user message's content, one a line."""
    if isinstance(task.prompt, str):
        return task.prompt
    return "\n".join(m.get("content", "") for m in task.prompt if m.get("role") == "user")


# ---------------------------------------------------------------------------- turn budget


class TurnBased(Protocol):
    """What `tag_step` needs of an environment: the running episode's task (None once it is
    over), the turns left, and how a turn that did not end the episode is answered."""

    _task: Any
    _turns_left: int

    def _next_turn(self, body: str, error: str | None) -> Step: ...


E = TypeVar("E", bound=TurnBased)
P = TypeVar("P")


def tag_step(
    parse: Callable[[str], P], grammar: str, max_chars: int = MAX_ACTION_CHARS
) -> Callable[[Callable[[E, P], Step]], Callable[[E, Any], Step]]:
    """Make Gymnasium's `step(self, action)` of `step(self, parsed)`: after the episode
    ended, `episode_over()`; else a turn is spent and the action read and parsed, and a
    malformed one is answered by `self._next_turn` with the error and the `grammar`."""

    def wrap(act: Callable[[E, P], Step]) -> Callable[[E, Any], Step]:
        def step(self: E, action: Any) -> Step:
            if self._task is None:
                return episode_over()
            self._turns_left -= 1
            try:
                parsed = parse(read_action(action, max_chars))
            except ActionError as e:
                return self._next_turn(f"Error: {e}. {grammar}", str(e))
            return act(self, parsed)

        step.__doc__ = act.__doc__
        return step

    return wrap


def episode_over() -> Step:
    """A step after the episode ended: an error observation, nothing else happens."""
    return f"Error: {EPISODE_OVER}.", 0.0, True, False, {"turns_left": 0, "error": EPISODE_OVER}


def turns_note(left: int, last: str) -> str:
    """`\\nTurns left: N`, with `(last)` after it when one turn is left (and `last` is set)."""
    return f"\nTurns left: {left}" + (f" ({last})" if left == 1 and last else "")


def next_turn(body: str, error: str | None, left: int, last: str) -> Step:
    """A turn that did not end the episode: its observation and the turns left."""
    return body + turns_note(left, last), 0.0, False, False, {"turns_left": left, "error": error}


def out_of_turns(body: str, error: str | None, format_penalty: float, missing: str) -> Step:
    """The last turn passed without `missing` (the answer tag): truncated, and the reward
    is the format penalty, negated."""
    footer = f"\nTurns left: 0. The episode ended without {missing}."
    info = {"turns_left": 0, "error": error, "correct": False}
    return body + footer, -float(format_penalty), False, True, info


def verdict(correct: bool, left: int, reward: float | None = None, **info: Any) -> Step:
    """The step that graded an answer: `Correct.` or `Incorrect.`, and `reward` (default 1
    when correct, else 0); `info` adds to the step's info."""
    info = {"turns_left": left, "error": None, "correct": correct, **info}
    text = "Correct." if correct else "Incorrect."
    return text, float(correct) if reward is None else reward, True, False, info


def graded(
    body: str, verdict: str, reward: float, info: dict[str, Any], format_penalty: float
) -> Step:
    """The step that graded the work: terminated after `<submit/>` (`info["submitted"]`),
    else truncated (out of turns) and the reward less `format_penalty`."""
    if info["submitted"]:
        return f"{body} {verdict}", reward, True, False, info
    footer = f"\nTurns left: 0. The episode ended without <submit/>; the work was graded. {verdict}"
    return body + footer, reward - float(format_penalty), False, True, info


def tag_demonstration(tag: str, answer: Any, response_prefix: str = "") -> str | None:
    """`<tag>answer</tag>` after `response_prefix` (what a model turn that answers writes,
    for the supervised warm-up); None without an answer or when the prefix does not fit."""
    if answer is None:
        return None
    text = f"<{tag}>{answer}</{tag}>"
    return text[len(response_prefix) :] if text.startswith(response_prefix) else None
