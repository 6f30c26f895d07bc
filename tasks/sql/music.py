"""The music streaming database: artists, albums, tracks, users and their plays.

Held out: its questions are all in `test`, never seen in training or dev.
"""

from __future__ import annotations

import random

from tasks.sql import words
from tasks.sql.domains import load

_V = load("music").values
"""The lists the rows are drawn from (data/music.json)."""


def _band(rng: random.Random) -> str:
    shape = rng.randrange(3)
    if shape == 0:
        return f"The {rng.choice(words.ADJECTIVES)} {rng.choice(words.NOUNS)}s"
    if shape == 1:
        return f"{rng.choice(words.ADJECTIVES)} {rng.choice(words.NOUNS)}"
    return words.person(rng)


def build_rows(rng: random.Random) -> dict[str, list[tuple]]:
    """All rows, table by table in insertion order. A few artists have no album yet and a
    few users never played anything."""
    artists = [
        (i, name, rng.choice(words.COUNTRIES), rng.choice(_V["genres"]), rng.randint(1965, 2020))
        for i, name in enumerate(words.distinct(rng, _band, 150), start=1)
    ]
    albums = []
    for i, title in enumerate(words.distinct(rng, words.title, 450), start=1):
        artist = artists[rng.randint(0, 139)]
        albums.append((i, title, artist[0], rng.randint(artist[4], 2024)))
    tracks: list[tuple] = []
    for album_id, *_ in albums:
        for _ in range(rng.randint(4, 12)):
            tracks.append((len(tracks) + 1, words.title(rng), album_id,
                           int(rng.triangular(95, 540, 215)), int(rng.random() < 0.15)))  # fmt: skip # a generated row or table, one line per record
    users = []
    for i in range(1, 801):
        first, last = words.person(rng).lower().split()
        users.append((i, f"{first}.{last}{i}", rng.choice(words.COUNTRIES),
                      words.date(rng, 2015, 2024), words.weighted(rng, _V["plans"])))  # fmt: skip # a generated row or table, one line per record
    listeners = [u[0] for u in users if u[0] % 40]
    popular = tracks[: len(tracks) // 3]  # early albums get more plays
    plays = [
        (i, rng.choice(listeners), rng.choice(popular if rng.random() < 0.5 else tracks)[0],
         f"{words.date(rng, 2024, 2024)} {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}")
        for i in range(1, 7001)
    ]  # fmt: skip # a generated row or table, one line per record
    return {"artists": artists, "albums": albums, "tracks": tracks, "users": users,
            "plays": plays}  # fmt: skip # a generated row or table, one line per record
