"""Render a `World` as passages: a title (the entity's name) and 1-4 sentences each.

Each fact a question asks about lives in exactly one passage, its *gold* passage, which
`render` also returns under a key such as `("person", name, "bio")`. Other passages may
mention the same entity (a person's bio names the city they were born in), as real
encyclopaedia text does; those are the distractors a search has to rank below the gold.
"""

from __future__ import annotations

import dataclasses
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tasks.search.world import World

FactKey = tuple[str, str, str]
"""(entity kind, entity name, passage role), e.g. ("city", "Velmora", "geo")."""


@dataclass(frozen=True)
class Passage:
    """One retrievable unit of the corpus."""

    id: str
    """Stable id, `p00042`: its position in the corpus."""
    title: str
    """The entity the passage is about (several passages may share a title)."""
    text: str
    """One to four sentences."""

    @property
    def contents(self) -> str:
        """Search-R1's document format: the quoted title, a newline, the text."""
        return f'"{self.title}"\n{self.text}'


TEMPLATES = Path(__file__).with_name("passages.yaml")
"""The passage templates, in corpus order (format in the file's header)."""


class _Fields(string.Formatter):
    """`str.format` plus the spec `a`: the word with its indefinite article."""

    def format_field(self, value: Any, format_spec: str) -> str:
        if format_spec == "a":
            return ("an " if str(value)[:1].lower() in "aeiou" else "a ") + str(value)
        return super().format_field(value, format_spec)


def _list(items: list[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def _fields(world: World, each: str, entity: Any) -> dict[str, Any]:
    """The entity's fields, and those its templates derive from the rest of the world."""
    fields = dataclasses.asdict(entity)
    if each == "countries":
        fields["rivers"] = _list(
            [r.name for r in world.rivers.values() if r.country == entity.name]
        )
    elif each == "rivers":
        towns = [c.name for c in world.cities.values() if c.river == entity.name]
        fields["towns"] = _list(towns[:4])
    elif each == "cities":
        fields["is_capital"] = world.countries[entity.country].capital == entity.name
    elif each == "people":
        fields["born_country"] = world.cities[entity.born_city].country
    return fields


def render(world: World) -> tuple[list[Passage], dict[FactKey, str]]:
    """All passages of a world in a fixed order, and the gold passage id of every fact."""
    fmt = _Fields()
    drafts: list[tuple[FactKey, str, str]] = []
    for group in yaml.safe_load(TEMPLATES.read_text(encoding="utf-8")):
        for entity in getattr(world, group["each"]).values():
            fields = _fields(world, group["each"], entity)
            for template in group["passages"]:
                if "when" in template and not fields[template["when"]]:
                    continue
                kind, name, role = (fmt.format(part, **fields) for part in template["key"])
                sentences = [
                    s if isinstance(s, str) else s["text"]
                    for s in template["text"]
                    if isinstance(s, str) or fields[s["when"]]
                ]
                text = " ".join(fmt.format(s, **fields) for s in sentences)
                drafts.append(((kind, name, role), name, text))  # titled by the entity's name

    passages: list[Passage] = []
    gold: dict[FactKey, str] = {}
    for i, (key, title, text) in enumerate(drafts):
        pid = f"p{i:05d}"
        passages.append(Passage(pid, title, text))
        gold[key] = pid
    return passages, gold
