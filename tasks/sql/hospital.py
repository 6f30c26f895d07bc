"""The hospital database: doctors, patients, appointments, medications, prescriptions.

Held out: its questions are all in `dev`, so dev measures transfer to an unseen schema.
"""

from __future__ import annotations

import random

from tasks.sql import words
from tasks.sql.domains import load

_V = load("hospital").values
"""The lists the rows are drawn from (data/hospital.json)."""


def build_rows(rng: random.Random) -> dict[str, list[tuple]]:
    """All rows, table by table in insertion order. The last medication is never
    prescribed and a few patients have never had an appointment."""
    doctors = [
        (i, f"Dr. {name}", rng.choice(_V["specialties"]), rng.randint(1, 35))
        for i, name in enumerate(words.distinct(rng, words.person, 80), start=1)
    ]
    cities = [city for city, _ in words.CITIES[:20]]
    patients = [
        (i, words.person(rng), rng.choice(("female", "male")), rng.randint(1935, 2022),
         rng.choice(cities), words.weighted(rng, _V["blood_types"]))
        for i in range(1, 1201)
    ]  # fmt: skip # a generated row or table, one line per record
    appointments = [
        (i, rng.randint(1, 1170), rng.randint(1, 80), words.date(rng, 2022, 2024),
         rng.choice(_V["reasons"]), words.weighted(rng, _V["statuses"]))
        for i in range(1, 3501)
    ]  # fmt: skip # a generated row or table, one line per record
    medications = [
        (i, name, category, round(rng.uniform(0.05, 4.0), 2))
        for i, (name, category, _) in enumerate(_V["medications"], start=1)
    ]
    prescriptions: list[tuple] = []
    for appointment in appointments:
        if appointment[5] != "completed" or rng.random() < 0.1:
            continue
        med = rng.randint(1, len(_V["medications"]) - 1)
        dose = _V["medications"][med - 1][2] * rng.choice((1, 1, 2))
        prescriptions.append((len(prescriptions) + 1, appointment[0], med, dose,
                              rng.choice((3, 5, 7, 10, 14, 30))))  # fmt: skip # a generated row or table, one line per record
    return {"doctors": doctors, "patients": patients, "appointments": appointments,
            "medications": medications, "prescriptions": prescriptions}  # fmt: skip # a generated row or table, one line per record
