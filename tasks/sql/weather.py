"""The weather-network database: stations, their readings, alerts, and the engineers who
maintain them.

Held out in `dev`, and named unlike any train database: singular tables (`station`,
`reading`, `visit`) and abbreviated columns (`stn_name`, `temp_c`, `precip_mm`), while its
questions say "weather stations", "temperature", "rainfall" and "engineers".
"""

from __future__ import annotations

import random

from tasks.sql import words
from tasks.sql.domains import load

_V = load("weather").values
"""The lists the rows are drawn from (data/weather.json)."""


def _station(rng: random.Random) -> str:
    return f"{rng.choice(words.NOUNS)} {rng.choice(_V['landmarks'])}"


def build_rows(rng: random.Random) -> dict[str, list[tuple]]:
    """All rows, table by table in insertion order. The last six stations were never
    visited; readings are colder the higher a station stands."""
    regions = _V["regions"]
    stations = [
        (i, name, rng.choice(regions), rng.randint(2, 2400), rng.randint(1950, 2020))
        for i, name in enumerate(words.distinct(rng, _station, 60), start=1)
    ]
    reading = []
    for i in range(1, 3001):
        station = rng.choice(stations)
        temp = rng.gauss(14, 8) - station[3] / 250
        rain = max(0.0, rng.expovariate(0.3) - 2)
        reading.append((i, station[0], words.date(rng, 2024, 2024), round(temp, 1),
                        round(rain, 1), rng.randint(0, 95)))  # fmt: skip # a generated row or table, one line per record
    engineers = [
        (i, name, rng.choice(regions), rng.randint(1, 4))
        for i, name in enumerate(words.distinct(rng, words.person, 40), start=1)
    ]
    visits = [
        (i, rng.randint(1, 54), rng.randint(1, 40), words.date(rng, 2022, 2024),
         round(rng.uniform(0.5, 8.0), 1), words.weighted(rng, _V["outcomes"]))
        for i in range(1, 401)
    ]  # fmt: skip # a generated row or table, one line per record
    alerts = [
        (i, rng.randint(1, 60), words.date(rng, 2023, 2024),
         words.weighted(rng, _V["severities"]), rng.choice(_V["kinds"]))
        for i in range(1, 301)
    ]  # fmt: skip # a generated row or table, one line per record
    return {"station": stations, "reading": reading, "technician": engineers,
            "visit": visits, "alert": alerts}  # fmt: skip # a generated row or table, one line per record
