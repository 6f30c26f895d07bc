"""Which tables a looking warm-up demonstration probes (`SQLEnv(probe_share=...,
probe_when=...)`): pure functions of the gold query and the question.

`random` probes the gold query's tables for a seeded share of tasks, whatever the question
says. `unsure` probes only where the question does not name what the answer needs: a table
or column of the gold query is *named* when every word of it (split at `_` and at camelCase,
lower case) is a word of the question, plurals folded, `id` and `name` always (`orderItems`
is named by "order items"; `n_food_kg`, `cty` and `alert` are not named by "food in
kilograms", "cities" or "warnings"). A demonstration then looks before answering exactly where a reader would be
unsure, which is what a policy has to learn for schemas named unlike its train databases.

    tables_to_probe("SELECT SUM(n_food_kg) FROM t_feeding", "Add up the food ...", "unsure")
    -> ["t_feeding"]
"""

from __future__ import annotations

import re

import sqlglot
from sqlglot import exp

PROBE_WHEN = ("random", "unsure")
"""`random`: a seeded share of tasks probes; `unsure`: that share of the tasks whose gold
query uses a table or column the question does not name."""

GENERIC = frozenset({"id", "name"})
"""Words nearly every schema uses for keys and labels and few questions say ("the passenger
Lucia Larsen" filters on `name`): named whatever the question says."""
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def _fold(word: str) -> str:
    """A crude singular: cities -> city, boxes -> box, items -> item (never below 3 letters)."""
    for end, repl in (("ies", "y"), ("ses", "s"), ("xes", "x"), ("s", "")):
        if word.endswith(end) and len(word) - len(end) + len(repl) >= 3:
            return word[: -len(end)] + repl
    return word


def question_words(text: str) -> set[str]:
    """The question's words, lower case, plurals folded."""
    return {_fold(w) for w in re.findall(r"[a-z0-9]+", text.lower())}


def identifier_words(name: str) -> list[str]:
    """`orderItems` -> [order, item]; `n_food_kg` -> [n, food, kg]."""
    return [_fold(w) for w in re.split(r"[_\W]+", _CAMEL.sub("_", name).lower()) if w]


def named(name: str, words: set[str]) -> bool:
    """True when every word of identifier `name` is one of the question's `words` (or
    `GENERIC`): `passenger_id` is named by "passengers", `stn_name` is not."""
    parts = identifier_words(name)
    return bool(parts) and all(p in words or p in GENERIC for p in parts)


def tables_to_probe(gold_sql: str, question: str, when: str) -> list[str]:
    """The gold query's tables to look at, in the order it names them: all of them
    (`random`), or (`unsure`) those whose own name, or one of whose columns, the question
    does not name. [] when the query does not parse, or nothing is unsure."""
    try:
        tree = sqlglot.parse_one(gold_sql)
    except sqlglot.errors.ParseError:
        return []
    tables = list(dict.fromkeys(t.name for t in tree.find_all(exp.Table)))
    if when == "random" or not tables:
        return tables
    words = question_words(question)
    alias = {t.alias_or_name: t.name for t in tree.find_all(exp.Table)}
    unsure = {t for t in tables if not named(t, words)}
    for column in tree.find_all(exp.Column):
        if column.name in ("", "*") or named(column.name, words):
            continue
        if column.table:
            unsure.add(alias.get(column.table, tables[0]))
        elif len(tables) == 1:
            unsure.add(tables[0])
        else:  # an unqualified column of a join: its table is not written; look at all
            return tables
    return [t for t in tables if t in unsure]
