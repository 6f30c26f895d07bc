"""`skyrl/Math-v0`: answer an arithmetic or word problem with `<answer>NUMBER</answer>`.

Tag rule (as in the SQL environment): the first `<answer>` in the text counts; it must be
closed by `</answer>`, non-empty and hold no other tag. Reward 1.0 when the answer is
numerically equal to the gold number (`numeric_match`), else 0.0; either way the episode
terminates. A reply without a well-formed tag gets an error observation while turns are
left; on the last turn it ends the episode with reward `-format_penalty`.

That last case is `terminated`, not `truncated`: with the default single turn, the reply
is the answer attempt itself (there is no later state to bootstrap a value from), and
Gymnasium's `check_env` rejects an environment that truncates after one step.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Any

import gymnasium as gym

from environments import text_env
from tasks.task import Task

MAX_OBSERVATION_CHARS = 100_000
TOLERANCE = 1e-6
"""Absolute and relative tolerance of `numeric_match`."""
FORMAT_HINT = "Answer with <answer>NUMBER</answer>."

# the exponent is capped at 3 digits: Fraction("1e999999999") would build a huge integer
_DECIMAL = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d{1,3})?")
_THOUSANDS = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_FRACTION = re.compile(r"([+-]?\d+)\s*/\s*(\d+)")


def parse_number(text: str) -> Fraction | None:
    """An exact number from '42', '-3.5', '1,000', '3/4', '1e3', '$7', '12.'; else None."""
    s = text.strip().replace("\u2212", "-")  # a typographic minus
    if len(s) > 100:
        return None
    s = s.removeprefix("$").strip()
    if s.endswith("."):
        s = s[:-1]
    if _THOUSANDS.fullmatch(s):
        s = s.replace(",", "")
    fraction = _FRACTION.fullmatch(s)
    if fraction:
        den = int(fraction.group(2))
        return Fraction(int(fraction.group(1)), den) if den else None
    return Fraction(s) if _DECIMAL.fullmatch(s) else None


def numeric_match(pred: str, gold: Any) -> bool:
    """True when `pred` parses to a number within 1e-6 (absolute or relative) of `gold`."""
    p = parse_number(pred) if isinstance(pred, str) else None
    if isinstance(gold, bool) or p is None:
        return False
    if isinstance(gold, str):
        g = parse_number(gold)
    elif isinstance(gold, int | Fraction) or (isinstance(gold, float) and math.isfinite(gold)):
        g = Fraction(gold)
    else:
        g = None
    if g is None:
        return False
    diff = abs(p - g)
    return diff <= TOLERANCE or diff <= TOLERANCE * abs(g)


TAGS = text_env.Tags("answer")


def parse_answer(text: str) -> str:
    """The body of the first `<answer>` tag; ValueError (the observation's text) if malformed."""
    return TAGS.parse(text)[1]


class MathEnv(gym.Env):
    """One question, one number: `<answer>NUMBER</answer>` ends the episode."""

    grammar = "<answer>number</answer> answers"
    stop_strings = TAGS.stop_strings
    report_by = ("difficulty",)  # metadata keys evaluation reports break accuracy down by

    def __init__(self, max_turns: int = 1, format_penalty: float = 0.1, **kwargs: Any) -> None:
        self.max_turns = text_env.turn_limit(max_turns)
        self.format_penalty = format_penalty
        self.observation_space, self.action_space = text_env.text_spaces(MAX_OBSERVATION_CHARS)
        self._task: Task | None = None
        self._turns_left = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Start on `options["task"]`, or on a task drawn from the bundled train suite."""
        super().reset(seed=seed)
        task = text_env.episode_task(self, options, lambda: text_env.train_suite("math"))
        self._task, self._turns_left = task, self.max_turns
        observation = f"{text_env.last_message(task)}\n{FORMAT_HINT}"[:MAX_OBSERVATION_CHARS]
        return observation, {"turns_left": self._turns_left, "error": None, "task_id": task.id}

    @text_env.tag_step(parse_answer, FORMAT_HINT)
    def step(self, action: str) -> text_env.Step:
        assert self._task is not None
        correct = numeric_match(action, self._task.answer)
        self._task = None
        return text_env.verdict(correct, self._turns_left)

    def demonstration(self, task: Task) -> str | None:
        """What a model turn that answers `task` correctly writes (supervised warm-up)."""
        return text_env.tag_demonstration("answer", task.answer)

    def _next_turn(self, body: str, error: str | None) -> text_env.Step:
        """A malformed answer: another try while turns are left, else the format penalty
        (terminated: see the module's docstring)."""
        if self._turns_left > 0:
            return text_env.next_turn(body, error, self._turns_left, "")
        self._task = None
        info = {"turns_left": 0, "error": error, "correct": False}
        return f"Error: {error}. No turns left.", -float(self.format_penalty), True, False, info
