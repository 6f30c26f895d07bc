"""A toy environment a randomly initialised model can learn from scratch in a minute.

Reward = the fraction of characters in the reply that are digits. A random `tiny` model
writes digits rarely (10 of its ~400 tokens), so the mean reward starts near 0.03 and
only rises if the policy gradient works: advantages, loss, optimizer, weight sync.
"""

import gymnasium as gym

from environments.spaces import TextSpace


class DigitsEnv(gym.Env):
    stop_strings = ()

    def __init__(self, max_turns: int = 1, **kwargs):
        self.observation_space = TextSpace(10_000)
        self.action_space = TextSpace(10_000)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        task = (options or {}).get("task")
        return (task.prompt if task else "Write digits."), {}

    def step(self, action: str):
        text = action.strip()
        reward = sum(c.isdigit() for c in text) / max(1, len(text))
        return "", reward, True, False, {}
