"""Question templates and the seeded generator that fills them from a built database.

A `Template` is an English question and its gold SQL with `{placeholders}`. Each
placeholder draws from a pool: a SQL query run on the database (so every value a question
mentions is really stored there, spelled as stored) or a literal tuple. A filled template
is kept only if its gold query returns something worth grading: at least one row, not a
lone 0 or NULL, at most `MAX_ROWS` rows, and no tie in a ranking cut by `LIMIT`.

`Entity` describes one table in words (its noun, its name column, its categorical and
numeric columns); `entity_templates` turns that into the single-table questions every
domain shares, so a domain module hand-writes only its joins and nested queries.
"""

from __future__ import annotations

import itertools
import random
import re
import sqlite3
from dataclasses import dataclass, field

DIFFICULTIES = ("easy", "medium", "hard")
MAX_ROWS = 40
"""Gold answers longer than this make poor training targets and long observations."""
_MAX_MISSES = 12
"""A template that fails this many draws is exhausted (its value space is used up)."""


@dataclass(frozen=True)
class Template:
    """One question shape with its gold SQL."""

    difficulty: str
    """`easy`, `medium` or `hard`."""
    question: str
    """English question; `{name}` placeholders are filled from `params`."""
    sql: str
    """Gold SQL with the same placeholders."""
    params: dict[str, str | tuple] = field(default_factory=dict)
    """Placeholder -> SQL whose first column is the pool (may use earlier placeholders), or
    a literal tuple of values. Drawn in order."""
    keys: str | None = None
    """For a gold query ending in `LIMIT k`: SQL listing its ORDER BY keys in the same
    order; the draw is rejected when any two of the first k+1 keys tie (then which rows
    make the top k, or their order, would depend on the query plan)."""


def easy(question: str, sql: str, keys: str | None = None, **params: str | tuple) -> Template:
    """An easy template (single table, one filter or aggregate)."""
    return Template("easy", question, sql, params, keys)


def medium(question: str, sql: str, keys: str | None = None, **params: str | tuple) -> Template:
    """A medium template (a join, GROUP BY, ORDER BY/LIMIT or two filters)."""
    return Template("medium", question, sql, params, keys)


def hard(question: str, sql: str, keys: str | None = None, **params: str | tuple) -> Template:
    """A hard template (nested subquery, HAVING over a join, several joins)."""
    return Template("hard", question, sql, params, keys)


def most(question: str, name: str, join: str, fk: str, difficulty: str = "medium") -> Template:
    """Which row of `name`'s table (shown by `name`, e.g. `artists.name`) has the most rows
    joined to it by `fk` (`albums.artist_id`), with the keys that reject a tie for first."""
    table, (child, key) = name.split(".")[0], fk.split(".")
    sql = f"SELECT {name} {join} GROUP BY {table}.id, {name} ORDER BY COUNT(*) DESC LIMIT 1"
    keys = f"SELECT COUNT(*) FROM {child} GROUP BY {key} ORDER BY 1 DESC"
    return Template(difficulty, question, sql, {}, keys)


def more_than(question: str, name: str, join: str, fk: str, k: tuple | None = None) -> Template:
    """A hard template: the rows of `name`'s table with more than `{k}` rows joined by `fk`;
    `k` is drawn from the counts themselves unless given."""
    table, (child, key) = name.split(".")[0], fk.split(".")
    sql = f"SELECT {name} {join} GROUP BY {table}.id, {name} HAVING COUNT(*) > {{k}}"
    return hard(question, sql, k=k or f"SELECT COUNT(*) FROM {child} GROUP BY {key}")


@dataclass(frozen=True)
class Cat:
    """A categorical column: city, genre, status..."""

    column: str
    label: str
    """Singular noun for the column (`city`)."""
    plural: str
    """Plural noun (`cities`)."""
    phrase: str
    """Plural verb phrase with `{v}` for the value: `live in {v}`, `have the status '{v}'`."""


@dataclass(frozen=True)
class Num:
    """A numeric column: price, birth year, duration..."""

    column: str
    label: str
    """Noun phrase for the column (`price`, `birth year`)."""
    total: bool = False
    """Whether a SUM over the table means something (quantities yes, years no)."""


@dataclass(frozen=True)
class Entity:
    """One table described in words, for the single-table question shapes."""

    table: str
    singular: str
    plural: str
    name: str | None = None
    """Column that names a row (`name`, `title`), if any."""
    name_label: str = "names"
    """How a question calls that column, in the plural (`names`, `titles`)."""
    quoted: bool = False
    """Write names in quotes in questions (titles yes, people no)."""
    rel: str = "that"
    """Relative pronoun: `who` for people, `that` for things."""
    cats: tuple[Cat, ...] = ()
    nums: tuple[Num, ...] = ()


def entity_templates(e: Entity) -> list[Template]:
    """The shared single-table templates for one table."""
    t, n = e.table, e.name
    out = [easy(f"How many {e.plural} are there?", f"SELECT COUNT(*) FROM {t}")]
    named = "'{x}'" if e.quoted else "{x}"
    unique_names = f"SELECT {n} FROM {t} GROUP BY {n} HAVING COUNT(*) = 1"
    for c in e.cats:
        where = f"{c.column} = '{{v}}'"
        values = f"SELECT DISTINCT {c.column} FROM {t}"
        few = f"SELECT {c.column} FROM {t} GROUP BY {c.column} HAVING COUNT(*) <= 25"
        out += [
            easy(
                f"How many {e.plural} {c.phrase}?",
                f"SELECT COUNT(*) FROM {t} WHERE {where}",
                v=values,
            ),
            easy(
                f"List the distinct {c.plural} of the {e.plural}.",
                f"SELECT DISTINCT {c.column} FROM {t}",
            ),
            medium(
                f"How many {e.plural} are there for each {c.label}?",
                f"SELECT {c.column}, COUNT(*) FROM {t} GROUP BY {c.column}",
            ),
            medium(
                f"Which {c.label} has the most {e.plural}?",
                f"SELECT {c.column} FROM {t} GROUP BY {c.column} ORDER BY COUNT(*) DESC LIMIT 1",
                keys=f"SELECT COUNT(*) FROM {t} GROUP BY {c.column} ORDER BY 1 DESC",
            ),
            medium(
                f"Which {c.plural} have more than {{k}} {e.plural}?",
                f"SELECT {c.column} FROM {t} GROUP BY {c.column} HAVING COUNT(*) > {{k}}",
                k=f"SELECT COUNT(*) FROM {t} GROUP BY {c.column}",
            ),
            medium(
                f"How many different {c.plural} do the {e.plural} have?",
                f"SELECT COUNT(DISTINCT {c.column}) FROM {t}",
            ),
        ]
        if n:
            out += [
                easy(
                    f"What are the {e.name_label} of the {e.plural} {e.rel} {c.phrase}?",
                    f"SELECT {n} FROM {t} WHERE {where}",
                    v=few,
                ),
                easy(
                    f"What is the {c.label} of the {e.singular} {named}?",
                    f"SELECT {c.column} FROM {t} WHERE {n} = '{{x}}'",
                    x=unique_names,
                ),
            ]
        for m in e.nums:
            out += _cat_num_templates(e, c, m, where, few)
            out += _rule_templates(e, c, m, where, few)
    for m in e.nums:
        out += _num_templates(e, m, named, unique_names)
    return out


def _a(noun: str) -> str:
    """`a price`, `an enrollment year`."""
    return f"{'an' if noun[0] in 'aeio' else 'a'} {noun}"


def _num_templates(e: Entity, m: Num, named: str, unique_names: str) -> list[Template]:
    t, n, col = e.table, e.name, m.column
    out = [
        easy(f"What is the highest {m.label} of any {e.singular}?", f"SELECT MAX({col}) FROM {t}"),
        easy(f"What is the lowest {m.label} of any {e.singular}?", f"SELECT MIN({col}) FROM {t}"),
        easy(f"What is the average {m.label} of all {e.plural}?", f"SELECT AVG({col}) FROM {t}"),
        easy(
            f"How many {e.plural} have {_a(m.label)} greater than {{v}}?",
            f"SELECT COUNT(*) FROM {t} WHERE {col} > {{v}}",
            v=f"SELECT DISTINCT {col} FROM {t}",
        ),
        hard(
            f"How many {e.plural} have {_a(m.label)} above the average {m.label} of all {e.plural}?",
            f"SELECT COUNT(*) FROM {t} WHERE {col} > (SELECT AVG({col}) FROM {t})",
        ),
    ]
    if m.total:
        out.append(
            easy(f"What is the total {m.label} of all {e.plural}?", f"SELECT SUM({col}) FROM {t}")
        )
    if n:
        top = f"SELECT {col} FROM {t} ORDER BY {col} DESC"
        out += [
            easy(
                f"What is the {m.label} of the {e.singular} {named}?",
                f"SELECT {col} FROM {t} WHERE {n} = '{{x}}'",
                x=unique_names,
            ),
            easy(
                f"What are the {e.name_label} of the {e.plural} with {_a(m.label)} greater than {{v}}?",
                f"SELECT {n} FROM {t} WHERE {col} > {{v}}",
                v=f"SELECT DISTINCT {col} FROM {t} ORDER BY {col} DESC LIMIT 12 OFFSET 3",
            ),
            medium(
                f"Which {e.singular} has the highest {m.label}?",
                f"SELECT {n} FROM {t} ORDER BY {col} DESC LIMIT 1",
                keys=top,
            ),
            medium(
                f"What are the {e.name_label} of the {{k}} {e.plural} with the highest {m.label}?",
                f"SELECT {n} FROM {t} ORDER BY {col} DESC LIMIT {{k}}",
                keys=top,
                k=(3, 5),
            ),
            medium(
                f"What are the {e.name_label} of the {{k}} {e.plural} with the lowest {m.label}?",
                f"SELECT {n} FROM {t} ORDER BY {col} ASC LIMIT {{k}}",
                keys=f"SELECT {col} FROM {t} ORDER BY {col} ASC",
                k=(3, 5),
            ),
        ]
    return out


def _rule_templates(e: Entity, c: Cat, m: Num, where: str, few: str) -> list[Template]:
    """Golds that exercise the graders' rules: NULL cells, duplicate rows, a full ORDER BY
    without LIMIT (ties broken by every selected column, so the order is fixed)."""
    t, n, cc, col = e.table, e.name, c.column, m.column
    over = f"SELECT DISTINCT {col} FROM {t} ORDER BY {col} DESC LIMIT 12 OFFSET 3"
    out = [
        easy(
            f"List the {c.label} of every {e.singular} with {_a(m.label)} greater than {{v}}, "
            f"one row per {e.singular}.",
            f"SELECT {cc} FROM {t} WHERE {col} > {{v}}",
            v=over,
        ),
    ]
    if n:
        out += [
            easy(
                f"Which {e.plural} have no {c.label} on record?",
                f"SELECT {n} FROM {t} WHERE {cc} IS NULL",
            ),
            medium(
                f"List the {e.name_label} and {c.plural} of the {e.plural} with {_a(m.label)} "
                f"greater than {{v}} (the {c.label} may be missing).",
                f"SELECT {n}, {cc} FROM {t} WHERE {col} > {{v}}",
                v=over,
            ),
            medium(
                f"List the {e.name_label} and {m.label} of the {e.plural} {e.rel} {c.phrase}, "
                f"from the highest {m.label} to the lowest (ties in alphabetical order).",
                f"SELECT {n}, {col} FROM {t} WHERE {where} ORDER BY {col} DESC, {n} ASC",
                v=few,
            ),
        ]
    return out


def _cat_num_templates(e: Entity, c: Cat, m: Num, where: str, few: str) -> list[Template]:
    t, n, cc, col = e.table, e.name, c.column, m.column
    values = f"SELECT DISTINCT {cc} FROM {t}"
    out = [
        medium(
            f"What is the average {m.label} of the {e.plural} for each {c.label}?",
            f"SELECT {cc}, AVG({col}) FROM {t} GROUP BY {cc}",
        ),
        medium(
            f"Which {c.label} has the highest average {m.label} of {e.plural}?",
            f"SELECT {cc} FROM {t} GROUP BY {cc} ORDER BY AVG({col}) DESC LIMIT 1",
            keys=f"SELECT AVG({col}) FROM {t} GROUP BY {cc} ORDER BY 1 DESC",
        ),
        medium(
            f"How many {e.plural} {e.rel} {c.phrase} have {_a(m.label)} greater than {{n}}?",
            f"SELECT COUNT(*) FROM {t} WHERE {where} AND {col} > {{n}}",
            v=values,
            n=f"SELECT {col} FROM {t} WHERE {where}",
        ),
    ]
    if n:
        out += [
            medium(
                f"Among the {e.plural} {e.rel} {c.phrase}, which one has the highest {m.label}?",
                f"SELECT {n} FROM {t} WHERE {where} ORDER BY {col} DESC LIMIT 1",
                keys=f"SELECT {col} FROM {t} WHERE {where} ORDER BY {col} DESC",
                v=values,
            ),
            hard(
                f"What are the {e.name_label} of the {e.plural} {e.rel} {c.phrase} and whose "
                f"{m.label} is above the average {m.label} of all {e.plural}?",
                f"SELECT {n} FROM {t} WHERE {where} AND {col} > (SELECT AVG({col}) FROM {t})",
                v=few,
            ),
        ]
    return out


# ---------------------------------------------------------------------------- generation


def generate(
    conn: sqlite3.Connection,
    shared: list[Template],
    specific: list[Template],
    quotas: dict[str, int],
    seed: str,
) -> list[tuple[str, str, str]]:
    """Fill templates until each difficulty meets its quota; (difficulty, question, sql).

    Templates of one difficulty take turns in a seeded order, a domain's own (`specific`:
    joins, nested queries) alternating with the `shared` single-table shapes, so every
    shape gets its share before any repeats and joins are not crowded out by the many
    single-table shapes. Deterministic for a given database and seed.
    """
    rng = random.Random(seed)
    pools: dict[str, list] = {}
    seen: set[str] = set()
    out: list[tuple[str, str, str]] = []
    for difficulty in DIFFICULTIES:
        mine = [t for t in specific if t.difficulty == difficulty]
        common = [t for t in shared if t.difficulty == difficulty]
        rng.shuffle(mine)
        rng.shuffle(common)
        live = [t for pair in itertools.zip_longest(mine, common) for t in pair if t is not None]
        misses = [0] * len(live)
        taken = 0
        while taken < quotas[difficulty] and any(m < _MAX_MISSES for m in misses):
            for i, template in enumerate(live):
                if taken >= quotas[difficulty]:
                    break
                if misses[i] >= _MAX_MISSES:
                    continue
                filled = _fill(conn, template, rng, pools)
                if filled is None or filled[1] in seen:
                    misses[i] += 1
                    continue
                seen.add(filled[1])
                out.append((difficulty, *filled))
                taken += 1
    return out


def _fill(
    conn: sqlite3.Connection, t: Template, rng: random.Random, pools: dict[str, list]
) -> tuple[str, str] | None:
    """Draw values for a template; (question, sql), or None if the draw is not gradable."""
    values: dict[str, object] = {}
    for name, source in t.params.items():
        if isinstance(source, str):
            query = source.format(**values)
            if query not in pools:
                pools[query] = [r[0] for r in conn.execute(query) if r[0] is not None]
            pool = pools[query]
        else:
            pool = list(source)
        if not pool:
            return None
        values[name] = rng.choice(pool)
    sql = t.sql.format(**values)
    rows = conn.execute(sql).fetchmany(MAX_ROWS + 1)
    if not rows or len(rows) > MAX_ROWS:
        return None
    if len(rows) == 1 and len(rows[0]) == 1 and rows[0][0] in (None, 0):
        return None
    if t.keys is not None:
        limit = re.search(r"LIMIT (\d+)$", sql)
        assert limit, f"template with keys must end in LIMIT k: {t.sql}"
        k = int(limit.group(1))
        keys = [r[0] for r in conn.execute(t.keys.format(**values)).fetchmany(k + 1)]
        if any(a == b for a, b in itertools.pairwise(keys)):  # top k and their order unique
            return None
    return t.question.format(**values), sql


def assign_splits(n: int, role: str, seed: str) -> list[str]:
    """Split labels for a database's n questions, in order.

    role `dev` or `test`: the whole database is held out in that split. role `shared`:
    a seeded 80/10/10 train/dev/test shuffle (callers pass one difficulty at a time, so
    every split gets its share of easy questions).
    """
    if role in ("dev", "test"):
        return [role] * n
    order = list(range(n))
    random.Random(seed).shuffle(order)
    n_held = max(1, round(n * 0.10)) if n >= 3 else 0
    labels = ["train"] * n
    for i in order[:n_held]:
        labels[i] = "dev"
    for i in order[n_held : 2 * n_held]:
        labels[i] = "test"
    return labels
