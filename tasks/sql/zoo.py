"""The zoo database: enclosures, zookeepers, animals and their feedings.

Held out in `dev` for the `sql_transfer` recipe only (`tasks.sql.transfer`), in a domain
and a convention no train database shares: `t_`-prefixed singular tables (`t_animal`),
columns prefixed by their type (`s_nickname`, `n_weight_kg`, `d_fed`) and `pk_`/`fk_` keys,
while its questions say "zookeepers", "weight" and "food".
"""

from __future__ import annotations

import random

from tasks.sql import words
from tasks.sql.domains import load

_V = load("zoo").values
"""The lists the rows are drawn from (data/zoo.json)."""


def _pen(rng: random.Random) -> str:
    return f"{rng.choice(words.ADJECTIVES).title()} {rng.choice(_V['pen_words'])}"


def build_rows(rng: random.Random) -> dict[str, list[tuple]]:
    """All rows, table by table in insertion order. The last three enclosures are empty;
    every 20th animal was never fed by the records."""
    pens = [
        (i, name, words.weighted(rng, _V["habitats"]), rng.randint(8, 120) * 10)
        for i, name in enumerate(words.distinct(rng, _pen, 24), start=1)
    ]
    keepers = [
        (i, words.person(rng), words.weighted(rng, _V["shifts"]), rng.randint(1995, 2024))
        for i in range(1, 31)
    ]
    animals = [
        (i, name, rng.choice(_V["species"]), rng.randint(1, 21),
         round(rng.lognormvariate(3.5, 1.2), 1), rng.randint(2000, 2024))
        for i, name in enumerate(words.distinct(rng, lambda r: r.choice(words.FIRST_NAMES), 50), start=1)
    ]  # fmt: skip # a generated row or table, one line per record
    fed = [a[0] for a in animals if a[0] % 20]
    feedings = [
        (i, rng.choice(fed), rng.randint(1, 30), words.date(rng, 2024, 2024),
         words.weighted(rng, _V["foods"]), round(rng.uniform(0.2, 12.0), 1))
        for i in range(1, 1501)
    ]  # fmt: skip # a generated row or table, one line per record
    return {"t_enclosure": pens, "t_keeper": keepers, "t_animal": animals, "t_feeding": feedings}
