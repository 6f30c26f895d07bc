"""The football-league database: clubs, their players and the games between them.

Held out in `test` for the `sql_transfer` recipe only (`tasks.sql.transfer`), in a domain
and a convention no train database shares: `tbl`-prefixed singular tables (`tblTeam`),
PascalCase columns and `<Table>ID` keys (`TeamID`, `HomeTeamID`), while its questions say
"clubs", "footballers" and "games".
"""

from __future__ import annotations

import random

from tasks.sql import words
from tasks.sql.domains import load

_V = load("league").values
"""The lists the rows are drawn from (data/league.json)."""


def build_rows(rng: random.Random) -> dict[str, list[tuple]]:
    """All rows, table by table in insertion order. Every club hosts and visits; the
    crowd grows with the host's age."""
    cities = [city for city, _ in words.CITIES[:16]]
    clubs = [
        (i, f"{city} {rng.choice(_V['club_words'])}", city, rng.randint(1870, 1990))
        for i, city in enumerate(cities, start=1)
    ]
    players = [
        (i, words.person(rng), rng.randint(1, len(clubs)), words.weighted(rng, _V["positions"]),
         rng.randint(1, 40), rng.randint(1985, 2006))
        for i in range(1, 401)
    ]  # fmt: skip # a generated row or table, one line per record
    games = []
    for i in range(1, 481):
        home, away = rng.sample(clubs, 2)
        crowd = int(rng.gauss(9000, 3000) + (2000 - home[3]) * 40)
        games.append((i, home[0], away[0], words.date(rng, 2023, 2024), rng.randint(0, 5),
                      rng.randint(0, 4), max(500, crowd)))  # fmt: skip # a generated row or table, one line per record
    return {"tblTeam": clubs, "tblPlayer": players, "tblMatch": games}
