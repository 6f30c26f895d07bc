"""A seeded fictional world: continents, seas, countries, cities, rivers, people, companies
and inventions, tied together by relations (born in, founded, invented, lies on, flows into).

Every name is invented from syllables, so no model has memorised a fact about it: a
question can only be answered by searching the corpus rendered from this world. Names are
unique across the whole world (a city never shares a word with a company), which keeps
every question's answer unambiguous.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

_ONSETS = "b br c d dr f g gr h k kr l m n p pr r s st t tr v z th sh j"
_VOWELS = "a e i o u a e i o ae ai ei ou"
_CODAS = ("", "", "", "n", "r", "l", "s", "th", "m", "nd", "rk", "x", "v")

_PROFESSION_TEXT = (
    "engineer chemist architect painter physician astronomer merchant composer "
    "mathematician botanist shipbuilder poet cartographer geologist"
)
PROFESSIONS = tuple(_PROFESSION_TEXT.split())
INDUSTRIES = {
    "textile": "Textiles",
    "shipping": "Shipping",
    "mining": "Mining",
    "railway": "Railways",
    "glass": "Glassworks",
    "printing": "Press",
    "brewing": "Brewery",
    "clockmaking": "Clockworks",
    "banking": "Bank",
    "pharmaceutical": "Remedies",
}
"""industry -> the word every company of that industry ends its name with."""
_DEVICE_TEXT = (
    "engine loom lamp compass telescope valve pump clock kiln sextant furnace dynamo "
    "barometer lathe"
)
DEVICES = tuple(_DEVICE_TEXT.split())
CATEGORIES = ("navigation", "industrial", "household", "scientific", "medical")


@dataclass(frozen=True)
class Country:
    """A country: lies on a continent, has a capital (one of its cities)."""

    name: str
    continent: str
    capital: str
    currency: str
    language: str
    population_m: int
    """Population in millions."""


@dataclass(frozen=True)
class City:
    """A city in one country, on one river."""

    name: str
    country: str
    river: str
    founded: int
    population: int


@dataclass(frozen=True)
class River:
    """A river in one country that flows into one sea."""

    name: str
    """Full name, e.g. `Oren River`."""
    country: str
    sea: str
    length_km: int


@dataclass(frozen=True)
class Person:
    """A person born in a city in a year; maybe a founder, an inventor or an employee."""

    name: str
    profession: str
    born_city: str
    born_year: int
    employer: str | None = None
    """Company the person worked for (people who neither founded nor invented)."""


@dataclass(frozen=True)
class Company:
    """A company founded by one person, in one year, headquartered in one city."""

    name: str
    industry: str
    founder: str
    founded: int
    city: str
    employees: int


@dataclass(frozen=True)
class Invention:
    """A device invented by one person and first manufactured by one company."""

    name: str
    """Without an article, e.g. `Tarvil loom`."""
    category: str
    inventor: str
    year: int
    maker: str


@dataclass(frozen=True)
class World:
    """Every entity, keyed by name."""

    seas: tuple[str, ...]
    countries: dict[str, Country]
    cities: dict[str, City]
    rivers: dict[str, River]
    people: dict[str, Person]
    companies: dict[str, Company]
    inventions: dict[str, Invention]


@dataclass(frozen=True)
class Sizes:
    """How many entities of each kind a world holds."""

    countries: int = 24
    cities_per_country: int = 10
    rivers_per_country: int = 2
    seas: int = 6
    companies: int = 300
    inventions: int = 250
    employees: int = 350


class _Names:
    """Unique, capitalised, pronounceable single words drawn from syllables."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.used: set[str] = set()
        self.onsets, self.vowels = _ONSETS.split(), _VOWELS.split()

    def word(self, syllables: tuple[int, int] = (2, 3)) -> str:
        while True:
            n = self.rng.randint(*syllables)
            parts = [self.rng.choice(self.onsets) + self.rng.choice(self.vowels) for _ in range(n)]
            word = ("".join(parts) + self.rng.choice(_CODAS)).capitalize()
            if 4 <= len(word) <= 11 and word.lower() not in self.used:
                self.used.add(word.lower())
                return word


def generate_world(seed: int, sizes: Sizes | None = None) -> World:
    """Build the world for a seed; the same seed always gives the same world."""
    sizes = sizes or Sizes()
    rng = random.Random(f"skyrl-search-world-{seed}")
    names = _Names(rng)
    continents = [names.word((2, 3)) for _ in range(4)]
    seas = tuple(f"{names.word()} Sea" for _ in range(sizes.seas))
    languages = [names.word() + "ic" for _ in range(sizes.countries // 2)]

    countries: dict[str, Country] = {}
    cities: dict[str, City] = {}
    rivers: dict[str, River] = {}
    for _ in range(sizes.countries):
        country = names.word((1, 2)) + rng.choice(("ia", "and", "ara", "en", "istan", "ora"))
        own_rivers = [f"{names.word((1, 2))} River" for _ in range(sizes.rivers_per_country)]
        for river in own_rivers:
            rivers[river] = River(river, country, rng.choice(seas), rng.randrange(80, 2400, 5))
        own_cities = [names.word() for _ in range(sizes.cities_per_country)]
        for city in own_cities:
            cities[city] = City(
                name=city,
                country=country,
                river=rng.choice(own_rivers),
                founded=rng.randint(420, 1650),
                population=rng.randrange(8_000, 2_400_000, 100),
            )
        countries[country] = Country(
            name=country,
            continent=rng.choice(continents),
            capital=own_cities[0],
            currency=names.word((1, 2)).lower(),
            language=rng.choice(languages),
            population_m=rng.randint(2, 90),
        )

    city_names = list(cities)
    firsts = [names.word((1, 2)) for _ in range(160)]
    n_people = sizes.companies + sizes.inventions + sizes.employees
    full_names: list[str] = []
    seen: set[str] = set()
    while len(full_names) < n_people:
        name = f"{rng.choice(firsts)} {names.word()}"
        if name not in seen:
            seen.add(name)
            full_names.append(name)
    founders = full_names[: sizes.companies]
    inventors = full_names[sizes.companies : sizes.companies + sizes.inventions]
    employees = full_names[sizes.companies + sizes.inventions :]

    companies: dict[str, Company] = {}
    for founder in founders:
        industry = rng.choice(list(INDUSTRIES))
        company = f"{names.word()} {INDUSTRIES[industry]}"
        companies[company] = Company(
            name=company,
            industry=industry,
            founder=founder,
            founded=rng.randint(1700, 1960),
            city=rng.choice(city_names),
            employees=rng.randrange(40, 90_000, 10),
        )
    company_names = list(companies)
    inventions: dict[str, Invention] = {}
    for inventor in inventors:
        invention = f"{names.word()} {rng.choice(DEVICES)}"
        inventions[invention] = Invention(
            name=invention,
            category=rng.choice(CATEGORIES),
            inventor=inventor,
            year=rng.randint(1720, 1980),
            maker=rng.choice(company_names),
        )

    people: dict[str, Person] = {}
    employee_set = set(employees)
    born_before = {c.founder: c.founded for c in companies.values()}
    born_before |= {i.inventor: i.year for i in inventions.values()}
    for name in full_names:
        latest = born_before.get(name, 1970) - 20
        people[name] = Person(
            name=name,
            profession=rng.choice(PROFESSIONS),
            born_city=rng.choice(city_names),
            born_year=rng.randint(latest - 40, latest),
            employer=rng.choice(company_names) if name in employee_set else None,
        )
    return World(seas, countries, cities, rivers, people, companies, inventions)
