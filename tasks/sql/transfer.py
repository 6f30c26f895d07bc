"""The transfer suite behind the `sql_transfer` recipe: train data in which only reading the
schema pays.

Each train task of `bookshop`, `university` and `airline` (today's train split, same
questions) runs on its database *rendered* in one of `TRAIN_CONVENTIONS`, chosen per task
by a seeded rule (`convention_of`): plural or singular tables; snake_case, camelCase,
PascalCase, abbreviated (`birth_yr`) or table-prefixed (`ath_name`) columns; `id` or
`<table>_id` keys. The gold query is rewritten to the rendering (sqlglot, scope by scope)
and the question swaps some identifier words for synonyms (`SYNONYMS`, seeded per task).
Dev and test are today's tasks (in a round robin over their databases), plus `zoo` (dev) and `league` (test), two databases whose domain
and convention no train database shares. Held-out conventions stay out of train: SQLite
compares names case-insensitively, so singular camelCase (`lending`) is singular PascalCase
too, and singular abbreviated (`weather`) is left out with both.

    from tasks.sql import load_suite
    load_suite("transfer-train")   # also "transfer-dev", "transfer-test"

A rendering is a copy of the bundled SQLite file with its tables and columns renamed
(`ALTER TABLE ... RENAME`), built on first use into `<cache>/sql/<VERSION>-transfer-<T>/`
as `<database>~<code>.sqlite` (`bookshop~singular-camel-tid`).
"""

from __future__ import annotations

import functools
import itertools
import os
import random
import re
import shutil
import sqlite3
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import sqlglot
from sqlglot import exp
from sqlglot.optimizer.scope import Scope, traverse_scope

from tasks.sql import domains, league, zoo
from tasks.sql.tables import sqlite_tables
from tasks.task import Task

VERSION = "t1"
"""Bump when renderings or the extra databases change (a folder of its own in the cache)."""
SPLITS = ("transfer-train", "transfer-dev", "transfer-test")
TRAIN_DATABASES = ("bookshop", "university", "airline")
EXTRA: dict[str, ModuleType] = {"zoo": zoo, "league": league}
"""Held-out databases of this suite only (not in the default suite's dev and test)."""
UNSEEN = ("weather", "lending", "zoo", "league")
"""Databases whose naming convention no train rendering uses; the rest are plural snake_case."""
SEP = "~"


@dataclass(frozen=True)
class Convention:
    """How a rendering names tables, columns and primary keys."""

    tables: str
    """`plural` (`authors`) or `singular` (`author`)."""
    columns: str
    """`snake`, `camel`, `pascal`, `abbrev` (`birth_yr`) or `prefixed` (`ath_birth_year`)."""
    keys: str
    """`id` (every primary key is `id`) or `tid` (`<table>_id`, as the foreign keys say)."""

    @property
    def code(self) -> str:
        return f"{self.tables}-{self.columns}-{self.keys}"

    def describe(self) -> str:
        """In words, e.g. "singular camelCase, <table>_id keys"."""
        style = {"snake": "snake_case", "camel": "camelCase", "pascal": "PascalCase"}
        cols = style.get(self.columns) or f"{self.columns} columns"
        return f"{self.tables} {cols}, {'id' if self.keys == 'id' else '<table>_id'} keys"


TRAIN_CONVENTIONS = tuple(
    Convention(t, c, k)
    for t in ("plural", "singular")
    for c in ("snake", "camel", "pascal", "abbrev", "prefixed")
    for k in ("id", "tid")
    if not (t == "singular" and c in ("camel", "pascal", "abbrev"))
)
"""14 conventions; none is weather's (singular, abbreviated) or lending's (singular camelCase)."""

ABBREV = {
    "year": "yr", "number": "num", "quantity": "qty", "price": "prc", "date": "dt",
    "name": "nm", "customer": "cust", "country": "ctry", "author": "auth", "title": "ttl",
    "department": "dept", "professor": "prof", "student": "stu", "enrollment": "enrl",
    "course": "crs", "passenger": "pax", "airport": "apt", "airline": "aln", "flight": "flt",
    "booking": "bkg", "destination": "dest", "origin": "orig", "minutes": "mins",
    "duration": "dur", "published": "pub", "birth": "brth", "status": "stat", "order": "ord",
    "item": "itm", "book": "bk", "pages": "pgs", "genre": "gnr", "budget": "bdgt",
    "building": "bldg", "salary": "sal", "code": "cd", "city": "cty", "email": "eml",
    "joined": "jnd", "departure": "dep", "nationality": "natl", "unit": "unt",
    "semester": "sem", "grade": "grd", "credits": "cr", "hire": "hr", "major": "mjr",
    "enrolled": "enr", "seat": "st", "class": "cls", "fare": "fr",
}  # fmt: skip # a word table, read across
"""Word -> abbreviation for `abbrev` columns; other words stay whole."""
RESERVED = {"order": "purchase", "group": "team", "user": "member", "table": "board"}
"""Singular table names that are SQL keywords, and the word a rendering uses instead."""

SYNONYMS = {
    "authors": "writers", "author": "writer", "customers": "shoppers", "customer": "shopper",
    "price": "cost", "genre": "category", "page count": "length in pages",
    "students": "learners", "student": "learner", "professors": "lecturers",
    "professor": "lecturer", "departments": "faculties", "department": "faculty",
    "courses": "classes", "course": "class", "passengers": "travellers",
    "passenger": "traveller", "airlines": "carriers", "airline": "carrier",
    "salary": "pay", "budget": "funding", "city": "town", "country": "nation",
    "status": "state", "bookings": "reservations", "booking": "reservation",
}  # fmt: skip # a word table, read across
"""Identifier words of the train databases and the word a train question may use instead
(each applies to about half of the questions whose text has it, seeded per task)."""


def convention_of(task_id: str) -> Convention:
    """The rendering of a train task: a seeded choice per task id."""
    return random.Random(f"skyrl-sql-transfer-{VERSION}-{task_id}").choice(TRAIN_CONVENTIONS)


def folder() -> Path:
    from tasks.cache import cache_dir
    from tasks.sql import VERSION as SUITE_VERSION

    return cache_dir() / "sql" / f"{SUITE_VERSION}-transfer-{VERSION}"


def is_transfer_database(name: str) -> bool:
    base, _, code = name.partition(SEP)
    return name in EXTRA or (
        base in TRAIN_DATABASES and code in {c.code for c in TRAIN_CONVENTIONS}
    )


def database_path(name: str) -> Path:
    """A rendering (`bookshop~plural-camel-id`) or an extra database, built on first use."""
    from tasks.sql import build_database
    from tasks.sql import database_path as bundled_path

    path = folder() / f"{name}.sqlite"
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=path.parent))
    try:
        if name in EXTRA:
            build_database(name, tmp / "db.sqlite")
        else:
            base, _, code = name.partition(SEP)
            shutil.copyfile(bundled_path(base), tmp / "db.sqlite")
            _rename(tmp / "db.sqlite", *renames(base, _by_code(code)))
        os.replace(tmp / "db.sqlite", path)  # a complete file or none; racers write equal bytes
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def convention(name: str) -> str:
    """How a database of this suite (or the default one) names things, in words."""
    base, _, code = name.partition(SEP)
    return _by_code(code).describe() if code else domains.load(base).convention


def convention_seen(name: str) -> bool:
    """Whether train renderings use this database's naming convention."""
    return name.partition(SEP)[0] not in UNSEEN


def _by_code(code: str) -> Convention:
    return next(c for c in TRAIN_CONVENTIONS if c.code == code)


# ---------------------------------------------------------------------------- renaming


def _schema(base: str) -> dict[str, list[str]]:
    """table -> its columns, in order, read from the bundled database."""
    from tasks.sql import database_path as bundled_path

    with sqlite_tables(bundled_path(base)) as (conn, names):
        return {t: [c[1] for c in conn.execute(f'PRAGMA table_info("{t}")')] for t in names}


def _style(words: list[str], style: str) -> str:
    if style == "camel":
        return words[0] + "".join(w.title() for w in words[1:])
    if style == "pascal":
        return "".join(w.title() for w in words)
    if style == "abbrev":
        return "_".join(ABBREV.get(w, w) for w in words)
    return "_".join(words)


def _prefix(words: list[str]) -> str:
    if len(words) > 1:
        return "".join(w[0] for w in words)
    w = words[0]
    return (w[0] + "".join(ch for ch in w[1:] if ch not in "aeiou"))[:3]


@functools.cache
def renames(base: str, conv: Convention) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """(table -> new name, table -> {column -> new name}) of one rendering."""
    singular = {e.table: e.singular.split() for e in domains.load(base).entities}
    tables, columns = {}, {}
    for table, cols in _schema(base).items():
        one = [RESERVED.get(w, w) for w in singular[table]]
        words = one if conv.tables == "singular" else table.split("_")
        tables[table] = _style(words, conv.columns if conv.columns in ("camel", "pascal") else "")
        mine = {}
        for col in cols:
            parts = col.split("_")
            if col == "id" and conv.keys == "tid":
                parts = [*singular[table], "id"]
            name = _style(parts, conv.columns)
            if conv.columns == "prefixed":
                name = f"{_prefix(singular[table])}_{name}"
            mine[col] = name
        if len({n.lower() for n in mine.values()}) != len(mine):
            raise ValueError(f"{base} rendered {conv.code}: two columns of {table} collide")
        columns[table] = mine
    if len({n.lower() for n in tables.values()}) != len(tables):
        raise ValueError(f"{base} rendered {conv.code}: two tables collide")
    return tables, columns


def _rename(path: Path, tables: dict[str, str], columns: dict[str, dict[str, str]]) -> None:
    """Rename in place, through temporary names: SQLite compares names case-insensitively,
    so `id` -> `Id` is a rename it would refuse as a duplicate."""
    conn = sqlite3.connect(path)
    try:
        for table, cols in columns.items():
            for k, old in enumerate(cols):
                conn.execute(f'ALTER TABLE "{table}" RENAME COLUMN "{old}" TO "__c{k}"')
            for k, new in enumerate(cols.values()):
                conn.execute(f'ALTER TABLE "{table}" RENAME COLUMN "__c{k}" TO "{new}"')
        for k, table in enumerate(tables):
            conn.execute(f'ALTER TABLE "{table}" RENAME TO "__t{k}"')
        for k, new in enumerate(tables.values()):
            conn.execute(f'ALTER TABLE "__t{k}" RENAME TO "{new}"')
        conn.commit()
        conn.execute("VACUUM")
    finally:
        conn.close()


def rewrite(sql: str, base: str, conv: Convention) -> str:
    """A gold query of `base` rewritten for its rendering in `conv`."""
    tables, columns = renames(base, conv)
    lower = {t.lower(): t for t in tables}
    tree = sqlglot.parse_one(sql, read="sqlite")
    done: set[int] = set()
    for scope in traverse_scope(tree):  # inner scopes first: a column belongs to the first
        # that holds it (`scope.columns` leaves out ORDER BY names that could be aliases)
        for col in scope.expression.find_all(exp.Column):
            if id(col) in done:
                continue
            done.add(id(col))
            table = _owner(scope, col, columns, lower)
            if table is not None:
                col.set("this", exp.to_identifier(columns[table][col.name.lower()]))
                if col.table and col.table.lower() == table.lower():
                    col.set("table", exp.to_identifier(tables[table]))
    for node in tree.find_all(exp.Table):
        if node.name.lower() in lower:
            node.set("this", exp.to_identifier(tables[lower[node.name.lower()]]))
    return tree.sql(dialect="sqlite")


def _owner(
    scope: Scope | None, col: exp.Column, columns: dict[str, dict[str, str]], lower: dict
) -> str | None:
    """The bundled table a column reference belongs to: its qualifier's, else the one table
    of the nearest scope (inner first, then outer for correlated subqueries) that has it."""
    name = col.name.lower()
    while scope is not None:
        found = []
        for alias, source in scope.sources.items():
            if not isinstance(source, exp.Table) or source.name.lower() not in lower:
                continue
            table = lower[source.name.lower()]
            if col.table and col.table.lower() != alias.lower():
                continue
            if name in {c.lower() for c in columns[table]}:
                found.append(table)
        if len(found) == 1:
            return found[0]
        scope = scope.parent
    return None


def _reword(question: str, seed: str) -> str:
    """Some identifier words swapped for synonyms, outside quoted values."""
    rng = random.Random(seed)
    parts = re.split(r"('[^']*')", question)
    for key, other in SYNONYMS.items():
        if rng.random() < 0.5:
            continue
        pattern = re.compile(rf"\b{re.escape(key)}\b", re.IGNORECASE)

        def swap(m: re.Match[str], other: str = other) -> str:
            return other[0].upper() + other[1:] if m.group(0)[0].isupper() else other

        parts = [p if p.startswith("'") else pattern.sub(swap, p) for p in parts]
    return "".join(parts)


# ---------------------------------------------------------------------------- the suite


def suite(split: str, bundled: dict[str, list[Task]], extra: list[Task]) -> list[Task]:
    """One split of the transfer suite, from the default suite's splits (`bundled`) and the
    extra databases' tasks."""
    if split == "transfer-train":
        out = []
        for t in bundled["train"]:
            base = str(t.metadata["database"])
            conv = convention_of(t.id)
            gold = rewrite(str(t.answer), base, conv)
            meta = {**t.metadata, "database": f"{base}{SEP}{conv.code}"}
            question = _reword(str(t.prompt), f"skyrl-sql-transfer-{VERSION}-{t.id}-words")
            out.append(Task(f"{t.id}-{conv.code}", t.env, question, gold, split, meta))
        return out
    mine = split.removeprefix("transfer-")
    by_db: dict[str, list[Task]] = {}
    for t in [*bundled[mine], *(e for e in extra if e.split == mine)]:
        by_db.setdefault(str(t.metadata["database"]), []).append(t)
    # round robin over the databases, so that any first N (`eval.limit`) holds every one
    return [
        Task(t.id, t.env, t.prompt, t.answer, split, t.metadata)
        for row in itertools.zip_longest(*by_db.values())
        for t in row
        if t is not None
    ]
