"""Seeded generated suites (`tasks.math`, `tasks.python_tasks`): one builder for both.

A suite is drawn from a seeded `random.Random`; every question belongs to exactly one
split by a hash of its text (10% test, 10% dev, 80% train), so no held-out question is
ever trained on, and no question repeats within a suite.
"""

from __future__ import annotations

import functools
import hashlib
import random
from collections.abc import Callable
from typing import Any

from tasks.task import Task

Draw = Callable[[random.Random], tuple[str, Any, dict[str, Any]]]
"""One problem from the generator: (question, gold answer, metadata)."""


def split_of(question: str) -> str:
    """The one split a question belongs to, from a stable hash of its text."""
    bucket = hashlib.sha256(question.encode()).digest()[0] % 10
    return "test" if bucket == 0 else "dev" if bucket == 1 else "train"


def generate_tasks(
    env: str, n: int, seed: int, draw: Draw, *, split: str | None = None, what: str = "they"
) -> list[Task]:
    """`n` distinct problems from `draw`; with `split`, only that split's (ids read
    `<env>-<split>-00012`; without, `<env>-s<seed>-00012`). ValueError, naming `what`
    was asked, when the generator holds fewer than `n` distinct questions."""
    rng = random.Random(seed)
    prefix = f"{env}-{split}" if split else f"{env}-s{seed}"
    tasks: list[Task] = []
    seen: set[str] = set()
    for _ in range(200 * n + 1000):
        if len(tasks) == n:
            break
        question, answer, metadata = draw(rng)
        if question in seen or (split is not None and split_of(question) != split):
            continue
        seen.add(question)
        tasks.append(
            Task(
                id=f"{prefix}-{len(tasks):05d}",
                env=env,
                prompt=question,
                answer=answer,
                split=split,
                metadata=metadata,
            )
        )
    if len(tasks) < n:
        raise ValueError(f"{what} hold only {len(tasks)} distinct questions, asked for {n}")
    return tasks


def suite_loader(
    splits: dict[str, tuple[int, int]], generate: Callable[..., list[Task]]
) -> Callable[[str | None], list[Task]]:
    """`load_suite(split)` over `splits` (split -> (number of tasks, seed)), built once."""

    @functools.cache
    def suite(split: str) -> tuple[Task, ...]:
        n, seed = splits[split]
        return tuple(generate(n, seed, split=split))

    def load_suite(split: str | None = "train") -> list[Task]:
        """The bundled suite of a split (`train`, `dev`, `test`); the same on every machine."""
        split = split or "train"
        if split not in splits:
            raise ValueError(f"unknown split {split!r}; known: {', '.join(splits)}")
        return list(suite(split))

    return load_suite
