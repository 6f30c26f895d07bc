"""The music streaming database: artists, albums, tracks, users and their plays.

Held out: its questions are all in `test`, never seen in training or dev.
"""

from __future__ import annotations

import random

from tasks.sql import words
from tasks.sql.questions import Cat, Entity, Num, hard, medium, more_than, most

SCHEMA = """
CREATE TABLE artists (
    id INTEGER PRIMARY KEY, name TEXT NOT NULL, country TEXT, genre TEXT, formed_year INTEGER
);
CREATE TABLE albums (
    id INTEGER PRIMARY KEY, title TEXT NOT NULL, artist_id INTEGER REFERENCES artists(id),
    release_year INTEGER
);
CREATE TABLE tracks (
    id INTEGER PRIMARY KEY, title TEXT NOT NULL, album_id INTEGER REFERENCES albums(id),
    duration_seconds INTEGER, explicit INTEGER
);
CREATE TABLE users (
    id INTEGER PRIMARY KEY, username TEXT NOT NULL, country TEXT, signup_date TEXT, plan TEXT
);
CREATE TABLE plays (
    id INTEGER PRIMARY KEY, user_id INTEGER REFERENCES users(id),
    track_id INTEGER REFERENCES tracks(id), played_at TEXT
);
"""

GENRES = ("Rock", "Pop", "Jazz", "Hip Hop", "Electronic", "Classical", "Folk", "Metal",
          "Reggae", "Blues")  # fmt: skip
PLANS = {"Free": 55, "Premium": 35, "Family": 10}


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
        (i, name, rng.choice(words.COUNTRIES), rng.choice(GENRES), rng.randint(1965, 2020))
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
                           int(rng.triangular(95, 540, 215)), int(rng.random() < 0.15)))  # fmt: skip
    users = []
    for i in range(1, 801):
        first, last = words.person(rng).lower().split()
        users.append((i, f"{first}.{last}{i}", rng.choice(words.COUNTRIES),
                      words.date(rng, 2015, 2024), words.weighted(rng, PLANS)))  # fmt: skip
    listeners = [u[0] for u in users if u[0] % 40]
    popular = tracks[: len(tracks) // 3]  # early albums get more plays
    plays = [
        (i, rng.choice(listeners), rng.choice(popular if rng.random() < 0.5 else tracks)[0],
         f"{words.date(rng, 2024, 2024)} {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}")
        for i in range(1, 7001)
    ]  # fmt: skip
    return {"artists": artists, "albums": albums, "tracks": tracks, "users": users,
            "plays": plays}  # fmt: skip


ENTITIES = (
    Entity("artists", "artist", "artists", "name",
           cats=(Cat("country", "country", "countries", "come from {v}"),
                 Cat("genre", "genre", "genres", "play {v}")),
           nums=(Num("formed_year", "formation year"),)),
    Entity("albums", "album", "albums", "title", "titles", quoted=True,
           nums=(Num("release_year", "release year"),)),
    Entity("tracks", "track", "tracks", "title", "titles", quoted=True,
           nums=(Num("duration_seconds", "duration in seconds", total=True),)),
    Entity("users", "user", "users", "username", "usernames", rel="who",
           cats=(Cat("country", "country", "countries", "live in {v}"),
                 Cat("plan", "plan", "plans", "have the {v} plan"))),
    Entity("plays", "play", "plays"),
)  # fmt: skip

_BY = "FROM albums JOIN artists ON albums.artist_id = artists.id"
_ON = "FROM tracks JOIN albums ON tracks.album_id = albums.id"
_PLAYED = "FROM plays JOIN tracks ON plays.track_id = tracks.id"
_ARTISTS = f"SELECT DISTINCT artists.name {_BY}"
_ALBUMS = "SELECT title FROM albums"
_USERS = "SELECT DISTINCT users.username FROM users JOIN plays ON plays.user_id = users.id"

TEMPLATES = (
    medium("How many albums has {a} released?",
           f"SELECT COUNT(*) {_BY} WHERE artists.name = '{{a}}'", a=_ARTISTS),
    medium("What are the titles of the albums by {a}?",
           f"SELECT albums.title {_BY} WHERE artists.name = '{{a}}'", a=_ARTISTS),
    medium("Which artist recorded the album '{t}'?",
           f"SELECT artists.name {_BY} WHERE albums.title = '{{t}}'", t=_ALBUMS),
    medium("How many tracks are on the album '{t}'?",
           f"SELECT COUNT(*) {_ON} WHERE albums.title = '{{t}}'", t=_ALBUMS),
    medium("What is the total duration in seconds of the album '{t}'?",
           f"SELECT SUM(tracks.duration_seconds) {_ON} WHERE albums.title = '{{t}}'", t=_ALBUMS),
    medium("How many plays does the user {u} have?",
           "SELECT COUNT(*) FROM plays JOIN users ON plays.user_id = users.id "
           "WHERE users.username = '{u}'", u=_USERS),
    most("Which artist has released the most albums?", "artists.name", _BY, "albums.artist_id"),
    medium("How many albums were released by artists who play {g}?",
           f"SELECT COUNT(*) {_BY} WHERE artists.genre = '{{g}}'", g=GENRES),
    medium("What is the title of the longest track on the album '{t}'?",
           f"SELECT tracks.title {_ON} WHERE albums.title = '{{t}}' "
           "ORDER BY tracks.duration_seconds DESC LIMIT 1", t=_ALBUMS,
           keys=f"SELECT tracks.duration_seconds {_ON} WHERE albums.title = '{{t}}' "
           "ORDER BY 1 DESC"),
    hard("Which artists have not released any albums?",
         "SELECT name FROM artists WHERE id NOT IN (SELECT artist_id FROM albums)"),
    hard("Which users have never played a track?",
         "SELECT username FROM users WHERE id NOT IN (SELECT user_id FROM plays)"),
    more_than("Which artists have released more than {k} albums?", "artists.name", _BY,
              "albums.artist_id"),
    hard("How many times have tracks by {a} been played?",
         f"SELECT COUNT(*) {_PLAYED} JOIN albums ON tracks.album_id = albums.id "
         "JOIN artists ON albums.artist_id = artists.id WHERE artists.name = '{a}'", a=_ARTISTS),
    hard("What are the titles of the {k} most played tracks?",
         f"SELECT tracks.title {_PLAYED} GROUP BY tracks.id, tracks.title ORDER BY COUNT(*) DESC LIMIT {{k}}",
         keys="SELECT COUNT(*) FROM plays GROUP BY track_id ORDER BY 1 DESC", k=(1, 3, 5)),
    hard("Which genre has the most plays?",
         f"SELECT artists.genre {_PLAYED} JOIN albums ON tracks.album_id = albums.id "
         "JOIN artists ON albums.artist_id = artists.id GROUP BY artists.genre "
         "ORDER BY COUNT(*) DESC LIMIT 1",
         keys=f"SELECT COUNT(*) {_PLAYED} JOIN albums ON tracks.album_id = albums.id "
         "JOIN artists ON albums.artist_id = artists.id GROUP BY artists.genre ORDER BY 1 DESC"),
    hard("How many users on the {p} plan have played more than {k} tracks?",
         "SELECT COUNT(*) FROM users WHERE plan = '{p}' AND id IN "
         "(SELECT user_id FROM plays GROUP BY user_id HAVING COUNT(*) > {k})",
         p=tuple(PLANS), k=(5, 8, 10, 12)),
    hard("How many explicit tracks are on albums by {a}?",
         f"SELECT COUNT(*) {_ON} JOIN artists ON albums.artist_id = artists.id "
         "WHERE artists.name = '{a}' AND tracks.explicit = 1", a=_ARTISTS),
)  # fmt: skip
