"""A Gymnasium space for free text: observations and actions of the text environments.

`gymnasium.spaces.Text` only contains strings drawn from its charset, and an observation
(a SQL result with newlines and unicode, a model's reply) is any string at all. `TextSpace`
contains every `str` up to `max_length` characters and samples printable ASCII, which is
what Gymnasium's `check_env` needs from it.
"""

from __future__ import annotations

import string
from typing import Any

import numpy as np
from gymnasium.spaces import Text


class TextSpace(Text):
    """Any string of `min_length..max_length` characters; samples are printable ASCII.

    `sample_max_length` caps the length of sampled strings (a random action of a million
    characters tests nothing a short one does not, and costs time in `check_env`).
    """

    def __init__(
        self,
        max_length: int,
        *,
        min_length: int = 0,
        sample_max_length: int = 256,
        seed: int | np.random.Generator | None = None,
    ) -> None:
        super().__init__(max_length, min_length=min_length, charset=string.printable, seed=seed)
        self.sample_max_length = max(min_length, min(sample_max_length, max_length))

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        if mask is None and probability is None:
            length = int(self.np_random.integers(self.min_length, self.sample_max_length + 1))
            mask = (length, None)
        return super().sample(mask=mask, probability=probability)

    def __repr__(self) -> str:
        return f"TextSpace({self.min_length}, {self.max_length})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, TextSpace)
            and self.min_length == other.min_length
            and self.max_length == other.max_length
        )


class ActionError(ValueError):
    """The action text does not follow the grammar (its message becomes the observation)."""


def action_text(action: Any, max_chars: int) -> str:
    """The model's action as text: bytes decoded (bad bytes replaced); ActionError for a
    non-text action or one longer than `max_chars`."""
    if isinstance(action, bytes | bytearray):
        action = bytes(action).decode("utf-8", "replace")
    if not isinstance(action, str):
        raise ActionError(f"the action must be text, not {type(action).__name__}")
    if len(action) > max_chars:
        raise ActionError(f"the action is {len(action)} characters; the limit is {max_chars}")
    return action
