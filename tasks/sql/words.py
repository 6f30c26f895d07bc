"""Word lists the seeded row builders draw from.

Plain tuples, no apostrophes or accents: every value a question quotes must be easy for a
small model to copy into a SQL string literal.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


def _pairs(text: str) -> tuple[tuple[str, str], ...]:
    return tuple((a, b) for a, b in (item.split(":") for item in text.split(", ")))


FIRST_NAMES = _words(
    "Emma Liam Olivia Noah Ava Lucas Mia Ethan Sofia Mateo Chloe Leo Amelia Hugo Isla "
    "Oscar Grace Felix Hannah Jonas Clara Adam Nora Elias Lina Samuel Julia David Maya "
    "Daniel Zoe Arthur Alice Henry Laura Omar Sara Victor Elena Tomas Ines Marco Aisha "
    "Kenji Priya Ravi Yuki Chen Fatima Diego Lucia Pablo Anna Erik Freya Ivan Nadia Paul "
    "Rosa Theo"
)

LAST_NAMES = _words(
    "Smith Garcia Muller Rossi Martin Silva Kim Nguyen Brown Lopez Schmidt Bernard Novak "
    "Jensen Costa Dubois Fischer Tanaka Patel Khan Wilson Moreau Weber Ricci Santos Larsen "
    "Horvat Ivanova Cohen Sato Singh Walker Lambert Keller Romano Ferreira Berg Kowalski "
    "Murphy Fournier Wagner Greco Almeida Nilsson Yamamoto Ali Taylor Girard Becker Conti"
)

# (city, country): the cities customers, patients and users live in.
CITIES = _pairs(
    "Paris:France, Lyon:France, Marseille:France, Berlin:Germany, Munich:Germany, "
    "Hamburg:Germany, Madrid:Spain, Barcelona:Spain, Seville:Spain, Rome:Italy, "
    "Milan:Italy, Naples:Italy, London:United Kingdom, Manchester:United Kingdom, "
    "Dublin:Ireland, Lisbon:Portugal, Porto:Portugal, Amsterdam:Netherlands, "
    "Rotterdam:Netherlands, Brussels:Belgium, Vienna:Austria, Zurich:Switzerland, "
    "Geneva:Switzerland, Stockholm:Sweden, Oslo:Norway, Copenhagen:Denmark, "
    "Helsinki:Finland, Warsaw:Poland, Prague:Czech Republic, Budapest:Hungary, "
    "Athens:Greece, Toronto:Canada, Boston:United States, Chicago:United States, "
    "Seattle:United States, Tokyo:Japan"
)

COUNTRIES = tuple(dict.fromkeys(country for _, country in CITIES))

ADJECTIVES = _words(
    "Silent Hidden Golden Broken Last Lost Secret Wild Quiet Bright Dark Frozen Burning "
    "Distant Little Endless Painted Crimson Silver Hollow Gentle Restless Midnight "
    "Northern Forgotten Electric Blue Velvet Shining Falling"
)

NOUNS = _words(
    "River Garden Mountain City Ocean Forest Kingdom Harbor Shadow Lantern Bridge Island "
    "Storm Mirror Window Summer Winter Road House Star Valley Crown Letter Journey Orchard "
    "Tide Horizon Meadow Tower Dream"
)


def person(rng: random.Random) -> str:
    """A 'First Last' name."""
    return f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}"


def title(rng: random.Random) -> str:
    """A book, album or track title such as 'The Silent River' or 'Midnight Garden'."""
    adjective, noun = rng.choice(ADJECTIVES), rng.choice(NOUNS)
    shape = rng.randrange(4)
    if shape == 0:
        return f"The {adjective} {noun}"
    if shape == 1:
        return f"{adjective} {noun}"
    if shape == 2:
        return f"{noun} of the {adjective} {rng.choice(NOUNS)}"
    return f"The {noun} and the {rng.choice(NOUNS)}"


def date(rng: random.Random, first_year: int, last_year: int) -> str:
    """An ISO date (YYYY-MM-DD) between 1 January of first_year and 28 December of last_year."""
    return f"{rng.randint(first_year, last_year)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"


def money(rng: random.Random, low: float, high: float) -> float:
    """A price such as 14.99: whole units in [low, high) plus .49, .95 or .99."""
    return round(rng.randrange(int(low), int(high)) + rng.choice((0.49, 0.95, 0.99)), 2)


def distinct(rng: random.Random, make: Callable[[random.Random], T], n: int) -> list[T]:
    """n different values from make(rng), in the order first drawn."""
    seen: dict[T, None] = {}
    while len(seen) < n:
        seen.setdefault(make(rng), None)
    return list(seen)


def weighted(rng: random.Random, choices: dict[str, int]) -> str:
    """One key of choices, drawn with its value as weight."""
    return rng.choices(list(choices), weights=list(choices.values()))[0]
