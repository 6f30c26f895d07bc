"""Each bundled database described as data, in `tasks/sql/data/<name>.json`.

A file holds what is data about a database, so that its Python module is only its row
builder (`build_rows`):

    split       `shared` (questions split 80/10/10 train/dev/test) or `dev`/`test` (held out)
    quotas      questions per difficulty
    nulled      [table, column]: about 8% of that column's cells are NULL
    convention  how its tables and columns are named ("plural snake_case", ...)
    schema      its CREATE TABLE statements, one string per line
    values      the lists the row builder draws from (genres, airports, ...)
    entities    its tables described in words (`questions.Entity`), for the shared shapes
    templates   its own questions (joins, nested queries): difficulty, question, sql,
                params (placeholder -> SQL pool or list of values), keys (`questions.Template`)
    phrasings   true: reword the questions with `data/phrasings.json` (seeded per question)
"""

from __future__ import annotations

import functools
import json
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tasks.sql.questions import Cat, Entity, Num, Template

FOLDER = Path(__file__).parent / "data"


@dataclass(frozen=True)
class Domain:
    """One database's data file, parsed."""

    name: str
    split: str
    quotas: dict[str, int]
    nulled: tuple[str, str]
    convention: str
    schema: str
    values: dict[str, Any]
    entities: tuple[Entity, ...]
    templates: tuple[Template, ...]
    phrasings: bool


def _entity(raw: dict[str, Any]) -> Entity:
    cats = tuple(Cat(**c) for c in raw.get("cats", ()))
    nums = tuple(Num(**n) for n in raw.get("nums", ()))
    return Entity(**{**raw, "cats": cats, "nums": nums})


def _template(raw: dict[str, Any]) -> Template:
    params = {k: v if isinstance(v, str) else tuple(v) for k, v in raw.get("params", {}).items()}
    return Template(raw["difficulty"], raw["question"], raw["sql"], params, raw.get("keys"))


@functools.cache
def load(name: str) -> Domain:
    """The parsed `data/<name>.json` (read once per process)."""
    raw = json.loads((FOLDER / f"{name}.json").read_text(encoding="utf-8"))
    table, column = raw["nulled"]
    return Domain(
        name=name,
        split=raw["split"],
        quotas=raw["quotas"],
        nulled=(table, column),
        convention=raw["convention"],
        schema="\n".join(raw["schema"]) + "\n",
        values=raw.get("values", {}),
        entities=tuple(_entity(e) for e in raw["entities"]),
        templates=tuple(_template(t) for t in raw.get("templates", ())),
        phrasings=bool(raw.get("phrasings", False)),
    )


@functools.cache
def _phrasings() -> list[tuple[re.Pattern[str], list[str]]]:
    rules = json.loads((FOLDER / "phrasings.json").read_text(encoding="utf-8"))["rules"]
    return [(re.compile(r["pattern"]), r["variants"]) for r in rules]


def reword(question: str, seed: str) -> str:
    """The question in one of the other phrasings of the first rule whose pattern matches
    it (the choice seeded by `seed`), or unchanged when none does. Rules only move the
    question's own words around: every value it quotes is kept as written."""
    for pattern, variants in _phrasings():
        match = pattern.fullmatch(question)
        if match:
            return match.expand(random.Random(seed).choice(variants))
    return question
