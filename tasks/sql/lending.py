"""The lending-library database: library branches, their items, borrowers and loans.

Held out in `test`, and named unlike any train database: singular tables (`member`,
`item`, `loan`) with camelCase columns (`fullName`, `homeCity`, `loanDate`, `daysKept`),
while its questions say "borrowers", "libraries" and "late fees".
"""

from __future__ import annotations

import random

from tasks.sql import words
from tasks.sql.domains import load

_V = load("lending").values
"""The lists the rows are drawn from (data/lending.json)."""


def build_rows(rng: random.Random) -> dict[str, list[tuple]]:
    """All rows, table by table in insertion order. Every 30th borrower and every 60th
    item was never part of a loan; a loan kept beyond 21 days pays a late fee."""
    cities = [city for city, _ in words.CITIES[:12]]
    branches = [
        (i, f"{city} {kind}", city, rng.randint(1890, 2015))
        for i, (city, kind) in enumerate(zip(cities, _V["branch_kinds"], strict=True), start=1)
    ]
    members = [
        (i, words.person(rng), rng.choice(cities), rng.randint(2005, 2024),
         words.weighted(rng, _V["tiers"]))
        for i in range(1, 901)
    ]  # fmt: skip # a generated row or table, one line per record
    items = [
        (i, words.title(rng), words.weighted(rng, _V["formats"]), rng.randint(1, len(branches)),
         rng.randint(1950, 2024), words.money(rng, 5, 60))
        for i in range(1, 1501)
    ]  # fmt: skip # a generated row or table, one line per record
    borrowers = [m[0] for m in members if m[0] % 30]
    lent = [it[0] for it in items if it[0] % 60]
    loans = []
    for i in range(1, 5001):
        days = rng.choice((7, 14, 14, 21, 21, 28, 35, 42))
        fee = round(0.25 * (days - 21), 2) if days > 21 else 0.0
        loans.append((i, rng.choice(lent), rng.choice(borrowers), words.date(rng, 2022, 2024),
                      days, fee))  # fmt: skip # a generated row or table, one line per record
    return {"branch": branches, "member": members, "item": items, "loan": loans}
