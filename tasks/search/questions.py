"""Question templates over a `World`: one-, two- and three-hop questions with gold passages.

A template (`questions.yaml`) turns one entity into (question, accepted answers, gold fact
keys) by following relations of the world, one per hop. The gold keys are the passages a
searcher must read, in order: hop 1 names the bridge entity (the founder of a company, the
city a river flows through), the next hop is about that entity.

    easy    1 hop   "Where was Dorav Kelmun born?"
    medium  2 hops  "In which country is the city where the founder of Brask Press was born?"
    hard    3 hops  "What is the capital of the country where the founder of Brask Press was born?"
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tasks.search.corpus import FactKey
from tasks.search.world import World

DIFFICULTY_OF_HOPS = {1: "easy", 2: "medium", 3: "hard"}


@dataclass(frozen=True)
class Question:
    """A generated question before it becomes a Task."""

    template: str
    """Template name, e.g. `founder_birth_country`."""
    text: str
    answers: tuple[str, ...]
    """Accepted answers; the first is the canonical one."""
    gold: tuple[FactKey, ...]
    """Gold passage of each hop, in the order a searcher needs them."""

    @property
    def hops(self) -> int:
        return len(self.gold)


TEMPLATES = Path(__file__).with_name("questions.yaml")
"""The relations of the world and the question templates over them (format in the file)."""


@functools.cache
def _templates() -> dict[str, Any]:
    return yaml.safe_load(TEMPLATES.read_text(encoding="utf-8"))


def _follow(w: World, collection: str, name: str, field: str) -> Any:
    entity = getattr(w, collection)[name]
    if field == "born_country":
        return w.cities[entity.born_city].country
    return getattr(entity, field)


def _accepted(w: World, collection: str | None, answer: Any) -> tuple[str, ...]:
    if collection == "cities":
        return (answer, f"{answer}, {w.cities[answer].country}")
    if collection in ("rivers", "seas"):
        return (answer, answer.removesuffix(" River" if collection == "rivers" else " Sea"))
    return (str(answer),)


def ask(w: World, template: dict[str, Any], entity: str) -> Question | None:
    """The template's question about `entity`; None when a hop leads nowhere (a person with
    no employer) or the answer is the entity itself (the capital's own capital)."""
    relations = _templates()["relations"]
    collection: str | None = template["each"]
    value: Any = entity
    gold: list[FactKey] = []
    for field in template["hops"]:
        target, kind, role = relations[f"{collection}.{field}"]
        gold.append((kind, value, role))
        value, collection = _follow(w, str(collection), value, field), target
        if value is None:
            return None
    if value == entity:
        return None
    answers = _accepted(w, collection, value)
    return Question(template["name"], template["text"].format(entity), answers, tuple(gold))


def generate(world: World, seed: int) -> list[Question]:
    """Every template's quota of questions, each about a distinct entity, in template order."""
    questions: list[Question] = []
    for template in _templates()["templates"]:
        pool: list[str] = list(getattr(world, template["each"]))
        random.Random(f"skyrl-search-q-{seed}-{template['name']}").shuffle(pool)
        made = 0
        for entity in pool:
            if made == template["quota"]:
                break
            question = ask(world, template, entity)
            if question is not None:
                questions.append(question)
                made += 1
    return questions
