"""The toy digits task behind a slow environment: a workload bound by environment latency.

Each model turn is answered after a delay drawn from a log-normal distribution (median
`delay_s`, shape `delay_sigma`, capped at 10 × the median): the right-skewed shape of tool
and network latencies, where most calls are quick and a few are slow, so the slowest
episode of a batch sets a sync step's pace. The delay of each step is a pure function of
the episode's seed, so sync and async runs face the same delays.

Reward: the fraction of digits in the model's replies, averaged over the episode's `turns`
turns (tests/e2e/toy/digits_env.py's task, repeated): a random `tiny` model starts near
0.03 and learns it within a few dozen steps. A plugin environment (`skyrl.yaml`:
`environments: {slow_digits: latency_env.py:SlowDigitsEnv}`); no torch, no ray.
"""

from __future__ import annotations

import math
import random
import time
from typing import Any

import gymnasium as gym

from environments.spaces import TextSpace


class SlowDigitsEnv(gym.Env):
    stop_strings = ()

    def __init__(
        self, max_turns: int = 2, turns: int = 2, delay_s: float = 0.3, delay_sigma: float = 0.6
    ) -> None:
        self.observation_space = TextSpace(10_000)
        self.action_space = TextSpace(10_000)
        self.turns = min(turns, max_turns)
        self.delay_s, self.delay_sigma = delay_s, delay_sigma
        self.rng = random.Random(0)
        self.turn = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.rng = random.Random(seed)
        self.turn = 0
        task = (options or {}).get("task")
        prompt = task.prompt if task is not None and hasattr(task, "prompt") else "Write digits."
        return prompt, {}

    def step(self, action: str):
        if self.delay_s > 0:
            delay = self.rng.lognormvariate(math.log(self.delay_s), self.delay_sigma)
            time.sleep(min(delay, 10 * self.delay_s))
        text = action.strip()
        reward = sum(c.isdigit() for c in text) / max(1, len(text)) / self.turns
        self.turn += 1
        done = self.turn >= self.turns
        return ("" if done else "More digits."), reward, done, False, {}
