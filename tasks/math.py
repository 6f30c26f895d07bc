"""Seeded arithmetic and word problems for `skyrl/Math-v0`, in four difficulty levels.

    1  single-digit + and -                 What is 7 - 9?
    2  two-digit +, - and *                 What is 23 * 41?
    3  multi-step expressions, parentheses  What is (12 + 5) * 3 - 4?
    4  short word problems                  Ana has 7 apples and buys 5 more. How many ...?

`load_suite(split)` returns a fixed suite (train 2000, dev 200, test 200). Splits are
disjoint by construction: every question belongs to exactly one split by a hash of its
text (10% test, 10% dev, 80% train), so no held-out question is ever trained on, even at
level 1 where only 200 distinct questions exist. No question repeats within a suite.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from typing import Any

from tasks.generated import generate_tasks, split_of, suite_loader
from tasks.task import Task

__all__ = ["LEVELS", "SPLITS", "generate", "load_suite", "split_of"]

SPLITS = {"train": (2000, 1001), "dev": (200, 2002), "test": (200, 3003)}
"""split -> (number of tasks, generator seed)."""
LEVELS = (1, 2, 3, 4)

Number = int | float
_OPS: dict[str, Callable[[int, int], int]] = {
    "+": lambda x, y: x + y,
    "-": lambda x, y: x - y,
    "*": lambda x, y: x * y,
}
_NAMES = ("Ana", "Ben", "Carla", "Dev", "Emma", "Farid", "Gita", "Hugo", "Ines", "Jun")
_ITEMS = ("apples", "pencils", "stickers", "marbles", "cookies", "books", "stamps", "shells")


def _level1(rng: random.Random) -> tuple[str, Number]:
    a, b, op = rng.randint(0, 9), rng.randint(0, 9), rng.choice("+-")
    return f"What is {a} {op} {b}?", _OPS[op](a, b)


def _level2(rng: random.Random) -> tuple[str, Number]:
    a, b, op = rng.randint(10, 99), rng.randint(10, 99), rng.choice("+-*")
    return f"What is {a} {op} {b}?", _OPS[op](a, b)


def _level3(rng: random.Random) -> tuple[str, Number]:
    a, b, c, d = (rng.randint(1, 20) for _ in range(4))
    o1, o2, o3 = (rng.choice("+-*") for _ in range(3))
    f1, f2, f3 = _OPS[o1], _OPS[o2], _OPS[o3]
    shape = rng.randrange(4)
    if shape == 0:
        return f"What is ({a} {o1} {b}) {o2} {c}?", f2(f1(a, b), c)
    if shape == 1:
        return f"What is {a} {o1} ({b} {o2} {c})?", f1(a, f2(b, c))
    if shape == 2:
        return f"What is ({a} {o1} {b}) {o2} ({c} {o3} {d})?", f2(f1(a, b), f3(c, d))
    # no parentheses: * binds tighter, equal precedence is left to right
    value = f1(a, b * c) if o2 == "*" and o1 != "*" else f2(f1(a, b), c)
    return f"What is {a} {o1} {b} {o2} {c}?", value


def _level4(rng: random.Random) -> tuple[str, Number]:
    name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    a, b, c = rng.randint(2, 12), rng.randint(2, 12), rng.randint(2, 30)
    kind = rng.randrange(6)
    if kind == 0:
        return (
            f"{name} has {a} {item} and buys {b} more. How many {item} does {name} have now?",
            a + b,
        )
    if kind == 1:
        total = a + b
        return f"{name} has {total} {item} and gives {b} to a friend. How many {item} are left?", a
    if kind == 2:
        return f"A box holds {a} {item}. How many {item} are in {b} boxes?", a * b
    if kind == 3:
        return (
            f"{name} shares {a * b} {item} equally among {b} friends. "
            f"How many {item} does each friend get?",
            a,
        )
    if kind == 4:
        return (
            f"{name} reads {a} pages a day for {b} days, then {c} more pages. "
            f"How many pages does {name} read in total?",
            a * b + c,
        )
    cost = b * (a + 0.5)
    return (
        f"A notebook costs {a}.50 dollars. How many dollars do {b} notebooks cost?",
        int(cost) if cost.is_integer() else cost,
    )


_GENERATORS = {1: _level1, 2: _level2, 3: _level3, 4: _level4}


def generate(
    n: int, seed: int, levels: Iterable[int] = LEVELS, *, split: str | None = None
) -> list[Task]:
    """`n` distinct problems, each at a level drawn uniformly from `levels`.

    With `split`, only questions belonging to that split (see `split_of`) are kept and
    ids read `math-<split>-00012`; without, ids read `math-s<seed>-00012`.
    ValueError when the levels hold fewer than `n` distinct questions.
    """
    levels = tuple(levels)
    unknown = [lv for lv in levels if lv not in _GENERATORS]
    if not levels or unknown:
        raise ValueError(f"unknown math level(s) {unknown or levels}; known: 1, 2, 3, 4")

    def draw(rng: random.Random) -> tuple[str, Number, dict[str, Any]]:
        level = rng.choice(levels)
        question, answer = _GENERATORS[level](rng)
        return question, answer, {"difficulty": level}

    return generate_tasks("math", n, seed, draw, split=split, what=f"levels {levels}")


load_suite = suite_loader(SPLITS, generate)
