"""The airline database: airports, airlines, flights, passengers and their bookings."""

from __future__ import annotations

import random

from tasks.sql import words
from tasks.sql.questions import Cat, Entity, Num, easy, hard, medium, more_than, most

SCHEMA = """
CREATE TABLE airports (
    id INTEGER PRIMARY KEY, code TEXT NOT NULL, name TEXT, city TEXT, country TEXT
);
CREATE TABLE airlines (id INTEGER PRIMARY KEY, name TEXT NOT NULL, country TEXT);
CREATE TABLE flights (
    id INTEGER PRIMARY KEY, flight_number TEXT NOT NULL,
    airline_id INTEGER REFERENCES airlines(id), origin_id INTEGER REFERENCES airports(id),
    destination_id INTEGER REFERENCES airports(id), departure_date TEXT,
    duration_minutes INTEGER, status TEXT
);
CREATE TABLE passengers (
    id INTEGER PRIMARY KEY, name TEXT NOT NULL, nationality TEXT, birth_year INTEGER
);
CREATE TABLE bookings (
    id INTEGER PRIMARY KEY, flight_id INTEGER REFERENCES flights(id),
    passenger_id INTEGER REFERENCES passengers(id), seat_class TEXT, price REAL
);
"""

AIRPORTS = (
    ("CDG", "Charles de Gaulle Airport", "Paris"), ("LYS", "Lyon Saint Exupery Airport", "Lyon"),
    ("FRA", "Frankfurt Airport", "Frankfurt"), ("BER", "Berlin Brandenburg Airport", "Berlin"),
    ("MUC", "Munich Airport", "Munich"), ("MAD", "Adolfo Suarez Madrid Barajas", "Madrid"),
    ("BCN", "Barcelona El Prat Airport", "Barcelona"), ("FCO", "Rome Fiumicino Airport", "Rome"),
    ("MXP", "Milan Malpensa Airport", "Milan"), ("LHR", "Heathrow Airport", "London"),
    ("MAN", "Manchester Airport", "Manchester"), ("DUB", "Dublin Airport", "Dublin"),
    ("LIS", "Lisbon Humberto Delgado Airport", "Lisbon"), ("AMS", "Amsterdam Schiphol", "Amsterdam"),
    ("BRU", "Brussels Airport", "Brussels"), ("VIE", "Vienna International Airport", "Vienna"),
    ("ZRH", "Zurich Airport", "Zurich"), ("ARN", "Stockholm Arlanda Airport", "Stockholm"),
    ("OSL", "Oslo Gardermoen Airport", "Oslo"), ("CPH", "Copenhagen Airport", "Copenhagen"),
    ("HEL", "Helsinki Vantaa Airport", "Helsinki"), ("WAW", "Warsaw Chopin Airport", "Warsaw"),
    ("PRG", "Vaclav Havel Airport Prague", "Prague"), ("ATH", "Athens International Airport", "Athens"),
    ("YYZ", "Toronto Pearson Airport", "Toronto"), ("BOS", "Boston Logan Airport", "Boston"),
    ("ORD", "Chicago OHare Airport", "Chicago"), ("JFK", "John F Kennedy Airport", "New York"),
    ("SEA", "Seattle Tacoma Airport", "Seattle"), ("NRT", "Tokyo Narita Airport", "Tokyo"),
)  # fmt: skip
_COUNTRY = dict(words.CITIES) | {"Frankfurt": "Germany", "New York": "United States"}
AIRLINES = (
    ("Aurora Air", "AU", "Norway"), ("Blue Horizon Airways", "BH", "United Kingdom"),
    ("Cielo Airlines", "CI", "Spain"), ("Danube Wings", "DW", "Austria"),
    ("Estrella Air", "ES", "Portugal"), ("Falcon Atlantic", "FA", "United States"),
    ("Gotham Jet", "GJ", "United States"), ("Helvetic Sky", "HS", "Switzerland"),
    ("Iris Airways", "IR", "France"), ("Jade Pacific", "JP", "Japan"),
    ("Kestrel Air", "KE", "Ireland"), ("Lumen Airlines", "LU", "Germany"),
    ("Maple Air", "MA", "Canada"), ("Nordic Wind", "NW", "Sweden"),
)  # fmt: skip
STATUSES = {"landed": 70, "delayed": 15, "cancelled": 5, "scheduled": 10}
CLASSES = {"Economy": 80, "Business": 15, "First": 5}


def build_rows(rng: random.Random) -> dict[str, list[tuple]]:
    """All rows, table by table in insertion order. Every 60th passenger never flew."""
    airports = [
        (i, code, name, city, _COUNTRY[city])
        for i, (code, name, city) in enumerate(AIRPORTS, start=1)
    ]
    airlines = [(i, name, country) for i, (name, _, country) in enumerate(AIRLINES, start=1)]
    flights = []
    numbers = words.distinct(rng, lambda r: r.randint(100, 9999), 1800)
    for i, number in enumerate(numbers, start=1):
        airline = rng.randint(1, len(AIRLINES))
        origin, destination = rng.sample(range(1, len(AIRPORTS) + 1), 2)
        far = (origin > 24) != (destination > 24)  # one end in North America or Asia
        minutes = rng.randint(420, 780) if far else rng.randint(55, 240)
        flights.append((i, f"{AIRLINES[airline - 1][1]}{number}", airline, origin, destination,
                        words.date(rng, 2023, 2024), minutes, words.weighted(rng, STATUSES)))  # fmt: skip
    passengers = [
        (i, words.person(rng), rng.choice(words.COUNTRIES), rng.randint(1940, 2010))
        for i in range(1, 1501)
    ]
    flyers = [p[0] for p in passengers if p[0] % 60]
    bookings = []
    for i in range(1, 4501):
        flight = rng.choice(flights)
        seat = words.weighted(rng, CLASSES)
        base = flight[6] * {"Economy": 1.0, "Business": 3.0, "First": 5.5}[seat]
        passenger = rng.choice(flyers)
        bookings.append((i, flight[0], passenger, seat, round(base * rng.uniform(0.6, 1.4), 2)))
    return {"airports": airports, "airlines": airlines, "flights": flights,
            "passengers": passengers, "bookings": bookings}  # fmt: skip


ENTITIES = (
    Entity("airports", "airport", "airports", "name",
           cats=(Cat("country", "country", "countries", "are in {v}"),)),
    Entity("airlines", "airline", "airlines", "name",
           cats=(Cat("country", "country", "countries", "are based in {v}"),)),
    Entity("flights", "flight", "flights", "flight_number", "flight numbers",
           cats=(Cat("status", "status", "statuses", "have the status '{v}'"),),
           nums=(Num("duration_minutes", "duration in minutes"),)),
    Entity("passengers", "passenger", "passengers", "name", rel="who",
           cats=(Cat("nationality", "nationality", "nationalities", "come from {v}"),),
           nums=(Num("birth_year", "birth year"),)),
    Entity("bookings", "booking", "bookings",
           cats=(Cat("seat_class", "seat class", "seat classes", "are in {v} class"),),
           nums=(Num("price", "price", total=True),)),
)  # fmt: skip

_OPERATED = "FROM flights JOIN airlines ON flights.airline_id = airlines.id"
_FROM = "FROM flights JOIN airports ON flights.origin_id = airports.id"
_TO = "FROM flights JOIN airports ON flights.destination_id = airports.id"
_ON = "FROM bookings JOIN flights ON bookings.flight_id = flights.id"
_ROUTE = (
    "FROM flights JOIN airports AS origin ON flights.origin_id = origin.id "
    "JOIN airports AS destination ON flights.destination_id = destination.id"
)
_AIRLINES = "SELECT name FROM airlines"
_CODES = "SELECT code FROM airports"
_NUMBERS = (
    "SELECT DISTINCT flights.flight_number FROM flights JOIN bookings ON flight_id = flights.id"
)

TEMPLATES = (
    easy("What is the code of the airport in {c}?",
         "SELECT code FROM airports WHERE city = '{c}'", c="SELECT city FROM airports"),
    easy("Which airport has the code {x}?", "SELECT name FROM airports WHERE code = '{x}'",
         x=_CODES),
    easy("In which city is the airport with code {x}?",
         "SELECT city FROM airports WHERE code = '{x}'", x=_CODES),
    medium("How many flights depart from the airport with code {x}?",
           f"SELECT COUNT(*) {_FROM} WHERE airports.code = '{{x}}'", x=_CODES),
    medium("How many flights arrive in {c}?",
           f"SELECT COUNT(*) {_TO} WHERE airports.city = '{{c}}'", c="SELECT city FROM airports"),
    medium("How many flights does {a} operate?",
           f"SELECT COUNT(*) {_OPERATED} WHERE airlines.name = '{{a}}'", a=_AIRLINES),
    medium("What is the average duration in minutes of the flights operated by {a}?",
           f"SELECT AVG(flights.duration_minutes) {_OPERATED} WHERE airlines.name = '{{a}}'",
           a=_AIRLINES),
    most("Which airline operates the most flights?", "airlines.name", _OPERATED, "flights.airline_id"),
    medium("Which airline operates flight {f}?",
           f"SELECT airlines.name {_OPERATED} WHERE flights.flight_number = '{{f}}'", f=_NUMBERS),
    medium("How many bookings were made for flight {f}?",
           f"SELECT COUNT(*) {_ON} WHERE flights.flight_number = '{{f}}'", f=_NUMBERS),
    medium("How many flights departed in {y}?",
           "SELECT COUNT(*) FROM flights WHERE strftime('%Y', departure_date) = '{y}'",
           y=("2023", "2024")),
    medium("How many flights departed in the month {m}?",
           "SELECT COUNT(*) FROM flights WHERE departure_date LIKE '{m}-%'",
           m=tuple(f"{y}-{m:02d}" for y in (2023, 2024) for m in range(1, 13))),
    hard("What are the flight numbers of the flights from {a} to {b}?",
         f"SELECT flights.flight_number {_ROUTE} WHERE origin.city = '{{a}}' "
         "AND destination.city = '{b}'", a="SELECT city FROM airports",
         b=f"SELECT destination.city {_ROUTE} WHERE origin.city = '{{a}}'"),
    hard("What are the names of the passengers booked on flight {f}?",
         "SELECT passengers.name FROM passengers JOIN bookings ON bookings.passenger_id = "
         "passengers.id JOIN flights ON bookings.flight_id = flights.id "
         "WHERE flights.flight_number = '{f}'", f=_NUMBERS),
    hard("Which passengers have never booked a flight?",
         "SELECT name FROM passengers WHERE id NOT IN (SELECT passenger_id FROM bookings)"),
    more_than("Which airlines operate more than {k} flights?", "airlines.name", _OPERATED,
              "flights.airline_id"),
    most("From which city do the most flights depart?", "airports.city", _FROM,
         "flights.origin_id", "hard"),
    hard("How many flights operated by {a} depart from airports in {c}?",
         "SELECT COUNT(*) FROM flights JOIN airlines ON flights.airline_id = airlines.id "
         "JOIN airports ON flights.origin_id = airports.id "
         "WHERE airlines.name = '{a}' AND airports.country = '{c}'",
         a=_AIRLINES, c="SELECT DISTINCT country FROM airports"),
    hard("What is the average price of {s} class bookings on flights operated by {a}?",
         f"SELECT AVG(bookings.price) {_ON} JOIN airlines ON flights.airline_id = airlines.id "
         "WHERE bookings.seat_class = '{s}' AND airlines.name = '{a}'",
         s=tuple(CLASSES), a=_AIRLINES),
    hard("Which passengers from {c} have booked a First class seat?",
         "SELECT DISTINCT passengers.name FROM passengers JOIN bookings ON "
         "bookings.passenger_id = passengers.id WHERE passengers.nationality = '{c}' "
         "AND bookings.seat_class = 'First'", c="SELECT DISTINCT nationality FROM passengers"),
    hard("What is the total booking revenue of the flights that depart from {c}?",
         f"SELECT SUM(bookings.price) {_ON} JOIN airports ON flights.origin_id = airports.id "
         "WHERE airports.city = '{c}'", c="SELECT city FROM airports"),
)  # fmt: skip
