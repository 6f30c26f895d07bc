"""Question templates over a `World`: one-, two- and three-hop questions with gold passages.

A template turns one entity into (question, accepted answers, gold fact keys). The gold
keys are the passages a searcher must read, in order: hop 1 names the bridge entity (the
founder of a company, the city a river flows through), the next hop is about that entity.

    easy    1 hop   "Where was Dorav Kelmun born?"
    medium  2 hops  "In which country is the city where the founder of Brask Press was born?"
    hard    3 hops  "What is the capital of the country where the founder of Brask Press was born?"
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

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


Template = Callable[[World, str], Question | None]


def _city(world: World, city: str) -> tuple[str, ...]:
    return (city, f"{city}, {world.cities[city].country}")


def _river(name: str) -> tuple[str, ...]:
    return (name, name.removesuffix(" River"))


def _sea(name: str) -> tuple[str, ...]:
    return (name, name.removesuffix(" Sea"))


def _bio(w: World, person: str) -> FactKey:
    return ("person", person, "bio")


# ---------------------------------------------------------------------------- one hop


def born_city(w: World, p: str) -> Question:
    city = w.people[p].born_city
    return Question("born_city", f"Where was {p} born?", _city(w, city), (_bio(w, p),))


def born_year(w: World, p: str) -> Question:
    year = str(w.people[p].born_year)
    return Question("born_year", f"In which year was {p} born?", (year,), (_bio(w, p),))


def founder(w: World, co: str) -> Question:
    gold = (("company", co, "profile"),)
    return Question("founder", f"Who founded {co}?", (w.companies[co].founder,), gold)


def headquarters(w: World, co: str) -> Question:
    gold = (("company", co, "profile"),)
    text = f"In which city is {co} headquartered?"
    return Question("headquarters", text, _city(w, w.companies[co].city), gold)


def founded_year(w: World, co: str) -> Question:
    gold = (("company", co, "profile"),)
    text = f"In which year was {co} founded?"
    return Question("founded_year", text, (str(w.companies[co].founded),), gold)


def inventor(w: World, inv: str) -> Question:
    gold = (("invention", inv, "origin"),)
    return Question("inventor", f"Who invented the {inv}?", (w.inventions[inv].inventor,), gold)


def maker(w: World, inv: str) -> Question:
    gold = (("invention", inv, "maker"),)
    text = f"Which company first manufactured the {inv}?"
    return Question("maker", text, (w.inventions[inv].maker,), gold)


def city_country(w: World, city: str) -> Question:
    gold = (("city", city, "geo"),)
    text = f"In which country is {city}?"
    return Question("city_country", text, (w.cities[city].country,), gold)


def city_river(w: World, city: str) -> Question:
    gold = (("city", city, "geo"),)
    text = f"Which river flows through {city}?"
    return Question("city_river", text, _river(w.cities[city].river), gold)


def capital(w: World, country: str) -> Question:
    gold = (("country", country, "capital"),)
    cap = w.countries[country].capital
    return Question("capital", f"What is the capital of {country}?", _city(w, cap), gold)


def river_sea(w: World, river: str) -> Question:
    gold = (("river", river, "course"),)
    text = f"Into which sea does the {river} flow?"
    return Question("river_sea", text, _sea(w.rivers[river].sea), gold)


# ---------------------------------------------------------------------------- two hops


def founder_birth_country(w: World, co: str) -> Question:
    boss = w.companies[co].founder
    country = w.cities[w.people[boss].born_city].country
    text = f"In which country is the city where the founder of {co} was born?"
    gold = (("company", co, "profile"), _bio(w, boss))
    return Question("founder_birth_country", text, (country,), gold)


def founder_birth_year(w: World, co: str) -> Question:
    boss = w.companies[co].founder
    text = f"In which year was the founder of {co} born?"
    gold = (("company", co, "profile"), _bio(w, boss))
    return Question("founder_birth_year", text, (str(w.people[boss].born_year),), gold)


def inventor_birth_city(w: World, inv: str) -> Question:
    who = w.inventions[inv].inventor
    text = f"In which city was the inventor of the {inv} born?"
    gold = (("invention", inv, "origin"), _bio(w, who))
    return Question("inventor_birth_city", text, _city(w, w.people[who].born_city), gold)


def headquarters_river(w: World, co: str) -> Question:
    city = w.companies[co].city
    text = f"Which river flows through the city where {co} is headquartered?"
    gold = (("company", co, "profile"), ("city", city, "geo"))
    return Question("headquarters_river", text, _river(w.cities[city].river), gold)


def city_capital(w: World, city: str) -> Question | None:
    country = w.countries[w.cities[city].country]
    if country.capital == city:
        return None  # the question would answer itself
    text = f"What is the capital of the country where {city} lies?"
    gold = (("city", city, "geo"), ("country", country.name, "capital"))
    return Question("city_capital", text, _city(w, country.capital), gold)


def maker_founder(w: World, inv: str) -> Question:
    co = w.inventions[inv].maker
    text = f"Who founded the company that first manufactured the {inv}?"
    gold = (("invention", inv, "maker"), ("company", co, "profile"))
    return Question("maker_founder", text, (w.companies[co].founder,), gold)


def city_sea(w: World, city: str) -> Question:
    river = w.cities[city].river
    text = f"Into which sea does the river that flows through {city} flow?"
    gold = (("city", city, "geo"), ("river", river, "course"))
    return Question("city_sea", text, _sea(w.rivers[river].sea), gold)


def employer_founder(w: World, p: str) -> Question | None:
    co = w.people[p].employer
    if co is None:
        return None
    text = f"Who founded the company that {p} worked for?"
    gold = (("person", p, "career"), ("company", co, "profile"))
    return Question("employer_founder", text, (w.companies[co].founder,), gold)


# ---------------------------------------------------------------------------- three hops


def founder_birth_capital(w: World, co: str) -> Question:
    boss = w.companies[co].founder
    country = w.cities[w.people[boss].born_city].country
    text = f"What is the capital of the country where the founder of {co} was born?"
    gold = (("company", co, "profile"), _bio(w, boss), ("country", country, "capital"))
    return Question("founder_birth_capital", text, _city(w, w.countries[country].capital), gold)


def inventor_birth_river(w: World, inv: str) -> Question:
    who = w.inventions[inv].inventor
    city = w.people[who].born_city
    text = f"Which river flows through the city where the inventor of the {inv} was born?"
    gold = (("invention", inv, "origin"), _bio(w, who), ("city", city, "geo"))
    return Question("inventor_birth_river", text, _river(w.cities[city].river), gold)


def headquarters_sea(w: World, co: str) -> Question:
    city = w.companies[co].city
    river = w.cities[city].river
    text = f"Into which sea does the river that flows through the city where {co} is headquartered flow?"
    gold = (("company", co, "profile"), ("city", city, "geo"), ("river", river, "course"))
    return Question("headquarters_sea", text, _sea(w.rivers[river].sea), gold)


# ---------------------------------------------------------------------------- the plan

# (template, entity kind it takes, how many questions)
PLAN: tuple[tuple[Template, str, int], ...] = (
    (born_city, "people", 40),
    (born_year, "people", 36),
    (founder, "companies", 40),
    (headquarters, "companies", 36),
    (founded_year, "companies", 36),
    (inventor, "inventions", 40),
    (maker, "inventions", 36),
    (city_country, "cities", 36),
    (city_river, "cities", 36),
    (capital, "countries", 24),
    (river_sea, "rivers", 36),
    (founder_birth_country, "companies", 40),
    (founder_birth_year, "companies", 36),
    (inventor_birth_city, "inventions", 40),
    (headquarters_river, "companies", 40),
    (city_capital, "cities", 40),
    (maker_founder, "inventions", 40),
    (city_sea, "cities", 36),
    (employer_founder, "people", 40),
    (founder_birth_capital, "companies", 32),
    (inventor_birth_river, "inventions", 32),
    (headquarters_sea, "companies", 32),
)


def generate(world: World, seed: int) -> list[Question]:
    """Every template's quota of questions, each about a distinct entity, in PLAN order."""
    questions: list[Question] = []
    for template, kind, quota in PLAN:
        pool: list[str] = list(getattr(world, kind))
        random.Random(f"skyrl-search-q-{seed}-{template.__name__}").shuffle(pool)
        made = 0
        for entity in pool:
            if made == quota:
                break
            question = template(world, entity)
            if question is not None:
                questions.append(question)
                made += 1
    return questions
