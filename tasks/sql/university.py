"""The university database: departments, professors, students, courses, enrollments."""

from __future__ import annotations

import random

from tasks.sql import words
from tasks.sql.domains import load

_V = load("university").values
"""The lists the rows are drawn from (data/university.json)."""


def build_rows(rng: random.Random) -> dict[str, list[tuple]]:
    """All rows, table by table in insertion order. A few professors teach no course and
    a few students take none."""
    departments = [
        (i, name, rng.choice(_V["buildings"]), rng.randint(40, 400) * 10000)
        for i, (name, _, _) in enumerate(_V["departments"], start=1)
    ]
    professors = []
    for i, name in enumerate(words.distinct(rng, words.person, 130), start=1):
        rank = words.weighted(rng, _V["ranks"])
        salary = {"Professor": 110, "Associate Professor": 90, "Assistant Professor": 75,
                  "Lecturer": 60}[rank] * 1000 + rng.randint(0, 30) * 1000  # fmt: skip # a generated row or table, one line per record
        professors.append((i, name, rng.randint(1, 12), rank, salary, rng.randint(1985, 2023)))
    students = [
        (i, words.person(rng), rng.choice(words.CITIES)[0], rng.randint(2019, 2024),
         round(rng.triangular(1.8, 4.0, 3.2), 2), rng.randint(1, 12))
        for i in range(1, 1501)
    ]  # fmt: skip # a generated row or table, one line per record
    courses: list[tuple] = []
    levels = _V["levels"]
    for dept_id, (_, prefix, topics) in enumerate(_V["departments"], start=1):
        staff = [p[0] for p in professors if p[2] == dept_id and p[0] % 13] or [1]
        for n, (level, topic) in enumerate((lv, tp) for tp in topics for lv in levels):
            if rng.random() < 0.75:
                code = f"{prefix}{100 + 100 * levels.index(level) + n}"
                courses.append((len(courses) + 1, code, f"{level} {topic}", dept_id,
                                rng.choice(staff), rng.choice((3, 3, 4, 4, 5, 6))))  # fmt: skip # a generated row or table, one line per record
    enrollments: list[tuple] = []
    for student_id in range(1, 1501):
        if student_id % 50 == 0:
            continue  # on leave: enrolled in nothing
        for course in rng.sample(courses, rng.randint(2, 6)):
            enrollments.append((len(enrollments) + 1, student_id, course[0],
                                rng.choice(_V["semesters"]), words.weighted(rng, _V["grades"])))  # fmt: skip # a generated row or table, one line per record
    return {"departments": departments, "professors": professors, "students": students,
            "courses": courses, "enrollments": enrollments}  # fmt: skip # a generated row or table, one line per record
