"""Seeded problems for `skyrl/Python-v0`: easy to solve by computing, hard to do in one's head.

    primes_sum      What is the sum of all prime numbers below 48213?
    fibonacci       With F(1) = F(2) = 1 ..., what is F(137)?
    digit_sum       What is the sum of the digits of 2^1234?
    divisible       How many integers from 1 to 93418 are divisible by 7 or 11?
    collatz         How many Collatz steps does 837799 take to reach 1?
    count_letter    How many times does the letter "e" appear in the following text? ...
    word_count      How many words are in the following text? ...
    distinct_words  How many distinct words (ignoring case) are in the following text? ...
    days_between    How many days are there from 1987-03-14 to 2031-11-02?
    weekday         What day of the week is 2019-07-23?           (exact: "Tuesday")
    date_add        What date is 1234 days after 2003-05-17?      (exact: "2006-10-02")
    sort_words      Sort these words alphabetically: ...          (exact: "apple kiwi pear")

`load_suite(split)` returns a fixed suite (train 1000, dev 100, test 100); `answer` is the
gold value and `metadata["grader"]` is `numeric` or `exact` (see `grade` of the Python environment).
Splits are disjoint: a question belongs to one split by a hash of its text, as in
`tasks.math`. No question repeats within a suite.
"""

from __future__ import annotations

import datetime as dt
import functools
import itertools
import math
import random
from collections.abc import Callable

from tasks.generated import generate_tasks, split_of, suite_loader
from tasks.task import Task

__all__ = ["GENERATORS", "SPLITS", "generate", "load_suite", "split_of"]

SPLITS = {"train": (1000, 4001), "dev": (100, 4002), "test": (100, 4003)}
"""split -> (number of tasks, generator seed)."""
PRIME_LIMIT = 100_000
"""Largest N of a primes_sum question."""

Problem = tuple[str, int | str, str]
"""(question, gold answer, grader)."""

_WORDS = [
    "apple",
    "river",
    "stone",
    "cloud",
    "green",
    "quiet",
    "yellow",
    "garden",
    "window",
    "silver",
    "morning",
    "letter",
    "orange",
    "planet",
    "butter",
    "candle",
    "forest",
    "bridge",
    "market",
    "summer",
    "winter",
    "pepper",
    "rocket",
    "shadow",
    "mirror",
    "tiger",
    "violet",
    "marble",
    "puzzle",
    "lemon",
    "anchor",
    "basket",
    "copper",
    "meadow",
]
_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


@functools.cache
def _prime_prefix_sums() -> list[int]:
    """prefix[n] = sum of the primes below n, for n <= PRIME_LIMIT."""
    sieve = bytearray([1]) * (PRIME_LIMIT + 1)
    sieve[0:2] = b"\x00\x00"
    for i in range(2, int(PRIME_LIMIT**0.5) + 1):
        if sieve[i]:
            sieve[i * i :: i] = bytearray(len(range(i * i, PRIME_LIMIT + 1, i)))
    return [0, *itertools.accumulate(i * sieve[i] for i in range(PRIME_LIMIT))]


def _text(rng: random.Random, lo: int, hi: int) -> str:
    words = [rng.choice(_WORDS) for _ in range(rng.randint(lo, hi))]
    return " ".join(w.capitalize() if rng.random() < 0.15 else w for w in words)


def _date(rng: random.Random) -> dt.date:
    return dt.date(1900, 1, 1) + dt.timedelta(days=rng.randrange(200 * 365))


def _primes_sum(rng: random.Random) -> Problem:
    n = rng.randint(1_000, PRIME_LIMIT)
    return f"What is the sum of all prime numbers below {n}?", _prime_prefix_sums()[n], "numeric"


def _fibonacci(rng: random.Random) -> Problem:
    n = rng.randint(40, 200)
    a, b = 1, 1
    for _ in range(n - 2):
        a, b = b, a + b
    question = f"With F(1) = F(2) = 1 and F(n) = F(n-1) + F(n-2), what is F({n})?"
    return question, b if n > 2 else 1, "numeric"


def _digit_sum(rng: random.Random) -> Problem:
    if rng.random() < 0.5:
        n = rng.randint(100, 3000)
        return f"What is the sum of the digits of 2^{n}?", sum(map(int, str(2**n))), "numeric"
    n = rng.randint(20, 400)
    value = sum(map(int, str(_factorial(n))))
    return f"What is the sum of the digits of {n}! ({n} factorial)?", value, "numeric"


def _factorial(n: int) -> int:
    return functools.reduce(lambda x, y: x * y, range(1, n + 1), 1)


def _divisible(rng: random.Random) -> Problem:
    n, a, b = rng.randint(10_000, 1_000_000), rng.randint(3, 19), rng.randint(20, 60)
    count = n // a + n // b - n // math.lcm(a, b)
    question = f"How many integers from 1 to {n} inclusive are divisible by {a} or by {b}?"
    return question, count, "numeric"


def _collatz(rng: random.Random) -> Problem:
    n = start = rng.randint(1_000, 2_000_000)
    steps = 0
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        steps += 1
    question = (
        f"Start from {start} and repeat: halve the number if it is even, otherwise replace it "
        "by 3 times the number plus 1. How many steps does it take to reach 1?"
    )
    return question, steps, "numeric"


def _count_letter(rng: random.Random) -> Problem:
    text, letter = _text(rng, 30, 80), rng.choice("aeinorstl")
    question = (
        f'How many times does the letter "{letter}" appear (lowercase or uppercase) in the '
        f'following text?\nText: "{text}"'
    )
    return question, text.lower().count(letter), "numeric"


def _word_count(rng: random.Random) -> Problem:
    text = _text(rng, 40, 120)
    question = f'How many words are in the following text?\nText: "{text}"'
    return question, len(text.split()), "numeric"


def _distinct_words(rng: random.Random) -> Problem:
    text = _text(rng, 30, 90)
    question = f'How many distinct words (ignoring case) are in the following text?\nText: "{text}"'
    return question, len(set(text.lower().split())), "numeric"


def _days_between(rng: random.Random) -> Problem:
    a, b = sorted((_date(rng), _date(rng)))
    return f"How many days are there from {a} to {b}?", (b - a).days, "numeric"


def _weekday(rng: random.Random) -> Problem:
    day = _date(rng)
    question = f"What day of the week is {day}? Answer with the English name of the day."
    return question, _WEEKDAYS[day.weekday()], "exact"


def _date_add(rng: random.Random) -> Problem:
    day, n = _date(rng), rng.randint(100, 20_000)
    question = f"What date is {n} days after {day}? Answer in YYYY-MM-DD format."
    return question, (day + dt.timedelta(days=n)).isoformat(), "exact"


def _sort_words(rng: random.Random) -> Problem:
    words = rng.sample(_WORDS, rng.randint(8, 15))
    question = (
        "Sort these words alphabetically and answer with them separated by single spaces: "
        + ", ".join(words)
    )
    return question, " ".join(sorted(words)), "exact"


GENERATORS: dict[str, Callable[[random.Random], Problem]] = {
    "primes_sum": _primes_sum,
    "fibonacci": _fibonacci,
    "digit_sum": _digit_sum,
    "divisible": _divisible,
    "collatz": _collatz,
    "count_letter": _count_letter,
    "word_count": _word_count,
    "distinct_words": _distinct_words,
    "days_between": _days_between,
    "weekday": _weekday,
    "date_add": _date_add,
    "sort_words": _sort_words,
}
"""Problem kind -> generator."""


def generate(n: int, seed: int, *, split: str | None = None) -> list[Task]:
    """`n` distinct problems of kinds drawn uniformly; with `split`, only that split's."""
    kinds = sorted(GENERATORS)

    def draw(rng: random.Random) -> tuple[str, int | str, dict[str, str]]:
        kind = rng.choice(kinds)
        question, answer, grader = GENERATORS[kind](rng)
        return question, answer, {"grader": grader, "kind": kind}

    return generate_tasks("python", n, seed, draw, split=split, what="the generators")


load_suite = suite_loader(SPLITS, generate)
