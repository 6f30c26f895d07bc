"""The airline database: airports, airlines, flights, passengers and their bookings."""

from __future__ import annotations

import random

from tasks.sql import words
from tasks.sql.domains import load

_V = load("airline").values
"""The lists the rows are drawn from (data/airline.json)."""


_COUNTRY = dict(words.CITIES) | {"Frankfurt": "Germany", "New York": "United States"}


def build_rows(rng: random.Random) -> dict[str, list[tuple]]:
    """All rows, table by table in insertion order. Every 60th passenger never flew."""
    airports = [
        (i, code, name, city, _COUNTRY[city])
        for i, (code, name, city) in enumerate(_V["airports"], start=1)
    ]
    airlines = [(i, name, country) for i, (name, _, country) in enumerate(_V["airlines"], start=1)]
    codes = [code for _, code, _ in _V["airlines"]]
    flights = []
    numbers = words.distinct(rng, lambda r: r.randint(100, 9999), 1800)
    for i, number in enumerate(numbers, start=1):
        airline = rng.randint(1, len(_V["airlines"]))
        origin, destination = rng.sample(range(1, len(_V["airports"]) + 1), 2)
        far = (origin > 24) != (destination > 24)  # one end in North America or Asia
        minutes = rng.randint(420, 780) if far else rng.randint(55, 240)
        flights.append((i, f"{codes[airline - 1]}{number}", airline, origin, destination,
                        words.date(rng, 2023, 2024), minutes, words.weighted(rng, _V["statuses"])))  # fmt: skip # a generated row or table, one line per record
    passengers = [
        (i, words.person(rng), rng.choice(words.COUNTRIES), rng.randint(1940, 2010))
        for i in range(1, 1501)
    ]
    flyers = [p[0] for p in passengers if p[0] % 60]
    bookings = []
    for i in range(1, 4501):
        flight = rng.choice(flights)
        seat = words.weighted(rng, _V["classes"])
        base = flight[6] * {"Economy": 1.0, "Business": 3.0, "First": 5.5}[seat]
        passenger = rng.choice(flyers)
        bookings.append((i, flight[0], passenger, seat, round(base * rng.uniform(0.6, 1.4), 2)))
    return {"airports": airports, "airlines": airlines, "flights": flights,
            "passengers": passengers, "bookings": bookings}  # fmt: skip # a generated row or table, one line per record
