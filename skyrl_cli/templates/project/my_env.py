"""A custom skyrl environment: unit conversions, answered with <answer>NUMBER</answer>.

This file is yours to change. skyrl finds the class through `environments:` in skyrl.yaml
(`my_env: "my_env.py:UnitsEnv"`). The contract is plain Gymnasium with text in and out:

    reset(seed=None, options={"task": Task}) -> (observation, info)
    step(action) -> (observation, reward, terminated, truncated, info)

A Task (one line of tasks.jsonl) has `id`, `prompt`, `answer` and `metadata`, read as
attributes (`task.prompt`) or as the row you wrote (`task["prompt"]`, `task.get("metadata")`).
Put what your environment needs in `metadata`. Bad actions are observations with an error, never
exceptions.
"""

from __future__ import annotations

import re

import gymnasium as gym

from environments.spaces import TextSpace

ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def grade(text: str, gold: float) -> float:
    """1.0 when the number inside <answer> is within 0.1% of the gold value."""
    match = ANSWER.search(text)
    if not match:
        return 0.0
    try:
        value = float(match.group(1).strip().replace(",", ""))
    except ValueError:
        return 0.0
    return 1.0 if abs(value - gold) <= 1e-3 * max(1.0, abs(gold)) else 0.0


class UnitsEnv(gym.Env):
    """Convert a quantity between units; one or more turns until an <answer>."""

    stop_strings = ("</answer>",)  # generation stops here; the turn is then graded
    report_by = ("to",)  # metadata keys `skyrl eval` breaks accuracy down by (here: per unit)

    def __init__(self, max_turns: int = 2, **kwargs):
        self.max_turns = max_turns
        self.observation_space = TextSpace(100_000)
        self.action_space = TextSpace(100_000)
        self.task = None
        self.turns = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.task = (options or {}).get("task")
        self.turns = 0
        question = self.task.prompt if self.task else "Convert 2 km to meters."
        return f"{question}\nReply with <answer>NUMBER</answer>.", {}

    def step(self, action: str):
        self.turns += 1
        gold = float(self.task.answer) if self.task else 2000.0
        if ANSWER.search(action):
            reward = grade(action, gold)
            return "", reward, True, False, {"correct": reward == 1.0}
        if self.turns >= self.max_turns:
            return "No answer given.", -0.1, False, True, {"correct": False}
        return "Please answer with <answer>NUMBER</answer>.", 0.0, False, False, {}
