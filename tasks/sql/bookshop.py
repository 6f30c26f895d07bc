"""The bookshop database: authors, books, customers, orders and their line items."""

from __future__ import annotations

import random

from tasks.sql import words
from tasks.sql.domains import load

_V = load("bookshop").values
"""The lists the rows are drawn from (data/bookshop.json)."""


def build_rows(rng: random.Random) -> dict[str, list[tuple]]:
    """All rows, table by table in insertion order. ~15 authors have no books, every
    25th book was never ordered, and some customers never ordered."""
    authors = [
        (i, name, rng.choice(words.COUNTRIES), rng.randint(1930, 1995))
        for i, name in enumerate(words.distinct(rng, words.person, 150), start=1)
    ]
    books = []
    for i, title in enumerate(words.distinct(rng, words.title, 700), start=1):
        price = words.money(rng, 5, 45)
        year = min(2024, int(rng.triangular(1950, 2025, 2018)))
        books.append((i, title, rng.randint(1, 135), rng.choice(_V["genres"]), price,
                      rng.randint(8, 90) * 10, year))  # fmt: skip # a generated row or table, one line per record
    customers = []
    for i in range(1, 901):
        name = words.person(rng)
        email = f"{name.lower().replace(' ', '.')}{i}@example.com"
        city = rng.choice(words.CITIES)[0]
        customers.append((i, name, email, city, words.date(rng, 2018, 2023)))
    orders = [
        (i, rng.randint(1, 860), words.date(rng, 2021, 2024), words.weighted(rng, _V["statuses"]))
        for i in range(1, 2601)
    ]
    sold = [b for b in books if b[0] % 25]
    items: list[tuple] = []
    for order_id, *_ in orders:
        for book in rng.sample(sold, rng.choice((1, 1, 2, 2, 3, 4))):
            items.append((len(items) + 1, order_id, book[0], rng.choice((1, 1, 1, 2, 3)), book[4]))
    return {"authors": authors, "books": books, "customers": customers, "orders": orders,
            "order_items": items}  # fmt: skip # a generated row or table, one line per record
