"""Render a `World` as passages: a title (the entity's name) and 1-4 sentences each.

Each fact a question asks about lives in exactly one passage, its *gold* passage, which
`render` also returns under a key such as `("person", name, "bio")`. Other passages may
mention the same entity (a person's bio names the city they were born in), as real
encyclopaedia text does; those are the distractors a search has to rank below the gold.
"""

from __future__ import annotations

from dataclasses import dataclass

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


def _thousands(n: int) -> str:
    return f"{n:,}"


def _a(word: str) -> str:
    return ("an " if word[:1].lower() in "aeiou" else "a ") + word


def _list(items: list[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def render(world: World) -> tuple[list[Passage], dict[FactKey, str]]:
    """All passages of a world in a fixed order, and the gold passage id of every fact."""
    drafts: list[tuple[FactKey, str, str]] = []

    def add(key: FactKey, *sentences: str) -> None:
        drafts.append((key, key[1], " ".join(sentences)))  # titled by the entity's name

    for c in world.countries.values():
        add(
            ("country", c.name, "capital"),
            f"{c.name} is a country on the continent of {c.continent}.",
            f"Its capital is {c.capital}.",
            f"The official language of {c.name} is {c.language}.",
        )
        own_rivers = [r.name for r in world.rivers.values() if r.country == c.name]
        add(
            ("country", c.name, "people"),
            f"{c.name} has a population of about {c.population_m} million.",
            f"Its currency is the {c.currency}.",
            f"Its rivers include the {_list(own_rivers)}.",
        )
    for r in world.rivers.values():
        add(
            ("river", r.name, "course"),
            f"The {r.name} is a river in {r.country}, {_thousands(r.length_km)} kilometres long.",
            f"It flows into the {r.sea}.",
        )
        on_river = [c.name for c in world.cities.values() if c.river == r.name]
        if on_river:
            add(
                ("river", r.name, "cities"),
                f"Towns along the {r.name} include {_list(on_river[:4])}.",
                "Its banks were settled early because of the fertile soil.",
            )
    for town in world.cities.values():
        capital = world.countries[town.country].capital == town.name
        add(
            ("city", town.name, "geo"),
            f"{town.name} is a city in {town.country}.",
            f"It lies on the {town.river}.",
            *([f"It is the capital of {town.country}."] if capital else []),
        )
        add(
            ("city", town.name, "history"),
            f"{town.name} was founded in {town.founded}.",
            f"Today it has about {_thousands(town.population)} inhabitants.",
        )
    for p in world.people.values():
        home = world.cities[p.born_city]
        add(
            ("person", p.name, "bio"),
            f"{p.name} was {_a(p.profession)} born in {home.name}, {home.country}, in {p.born_year}.",
        )
        if p.employer:
            add(
                ("person", p.name, "career"),
                f"{p.name} worked for {p.employer} for most of their career.",
            )
    for co in world.companies.values():
        add(
            ("company", co.name, "profile"),
            f"{co.name} is {_a(co.industry)} company headquartered in {co.city}.",
            f"It was founded in {co.founded} by {co.founder}.",
        )
        add(
            ("company", co.name, "size"),
            f"{co.name} employs about {_thousands(co.employees)} people.",
        )
        add(
            ("person", co.founder, "career"),
            f"In {co.founded}, {co.founder} started {_a(co.industry)} business of their own.",
        )
    for inv in world.inventions.values():
        add(
            ("invention", inv.name, "origin"),
            f"The {inv.name} is {_a(inv.category)} device invented by {inv.inventor} in {inv.year}.",
        )
        add(
            ("invention", inv.name, "maker"),
            f"The {inv.name} was first manufactured by {inv.maker}.",
            "Early models were sold mostly to workshops and schools.",
        )
        add(
            ("person", inv.inventor, "career"),
            f"{inv.inventor} spent years building prototypes before a breakthrough in {inv.year}.",
        )

    passages: list[Passage] = []
    gold: dict[FactKey, str] = {}
    for i, (key, title, text) in enumerate(drafts):
        pid = f"p{i:05d}"
        passages.append(Passage(pid, title, text))
        gold[key] = pid
    return passages, gold
