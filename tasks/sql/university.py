"""The university database: departments, professors, students, courses, enrollments."""

from __future__ import annotations

import random

from tasks.sql import words
from tasks.sql.questions import Cat, Entity, Num, hard, medium, more_than, most

SCHEMA = """
CREATE TABLE departments (
    id INTEGER PRIMARY KEY, name TEXT NOT NULL, building TEXT, budget INTEGER
);
CREATE TABLE professors (
    id INTEGER PRIMARY KEY, name TEXT NOT NULL, department_id INTEGER REFERENCES departments(id),
    rank TEXT, salary INTEGER, hire_year INTEGER
);
CREATE TABLE students (
    id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT, enrollment_year INTEGER,
    gpa REAL, major_id INTEGER REFERENCES departments(id)
);
CREATE TABLE courses (
    id INTEGER PRIMARY KEY, code TEXT NOT NULL, title TEXT, department_id INTEGER
    REFERENCES departments(id), professor_id INTEGER REFERENCES professors(id), credits INTEGER
);
CREATE TABLE enrollments (
    id INTEGER PRIMARY KEY, student_id INTEGER REFERENCES students(id),
    course_id INTEGER REFERENCES courses(id), semester TEXT, grade TEXT
);
"""

# (department, course code prefix, course topics)
DEPARTMENTS = (
    ("Computer Science", "CS", ("Programming", "Algorithms", "Databases", "Networks",
                                "Operating Systems", "Machine Learning")),
    ("Mathematics", "MATH", ("Calculus", "Linear Algebra", "Statistics", "Number Theory",
                             "Topology")),
    ("Physics", "PHYS", ("Mechanics", "Electromagnetism", "Quantum Physics", "Optics")),
    ("Chemistry", "CHEM", ("Organic Chemistry", "Biochemistry", "Physical Chemistry")),
    ("Biology", "BIO", ("Genetics", "Ecology", "Cell Biology", "Microbiology")),
    ("Economics", "ECON", ("Microeconomics", "Macroeconomics", "Econometrics", "Finance")),
    ("History", "HIST", ("Ancient History", "Modern Europe", "World History")),
    ("Philosophy", "PHIL", ("Logic", "Ethics", "Philosophy of Mind")),
    ("Psychology", "PSY", ("Cognitive Psychology", "Social Psychology", "Neuroscience")),
    ("Literature", "LIT", ("Poetry", "The Novel", "Drama", "Literary Theory")),
    ("Music", "MUS", ("Music Theory", "Composition", "Music History")),
    ("Engineering", "ENG", ("Thermodynamics", "Circuits", "Materials", "Robotics")),
)  # fmt: skip
BUILDINGS = ("North Hall", "South Hall", "Science Center", "Main Building", "West Wing",
             "Library Annex")  # fmt: skip
RANKS = {"Professor": 30, "Associate Professor": 30, "Assistant Professor": 25, "Lecturer": 15}
LEVELS = ("Introduction to", "Advanced", "Topics in", "Seminar in")
SEMESTERS = ("Fall 2022", "Spring 2023", "Fall 2023", "Spring 2024", "Fall 2024")
GRADES = {"A": 25, "B": 35, "C": 25, "D": 10, "F": 5}


def build_rows(rng: random.Random) -> dict[str, list[tuple]]:
    """All rows, table by table in insertion order. A few professors teach no course and
    a few students take none."""
    departments = [
        (i, name, rng.choice(BUILDINGS), rng.randint(40, 400) * 10000)
        for i, (name, _, _) in enumerate(DEPARTMENTS, start=1)
    ]
    professors = []
    for i, name in enumerate(words.distinct(rng, words.person, 130), start=1):
        rank = words.weighted(rng, RANKS)
        salary = {"Professor": 110, "Associate Professor": 90, "Assistant Professor": 75,
                  "Lecturer": 60}[rank] * 1000 + rng.randint(0, 30) * 1000  # fmt: skip
        professors.append((i, name, rng.randint(1, 12), rank, salary, rng.randint(1985, 2023)))
    students = [
        (i, words.person(rng), rng.choice(words.CITIES)[0], rng.randint(2019, 2024),
         round(rng.triangular(1.8, 4.0, 3.2), 2), rng.randint(1, 12))
        for i in range(1, 1501)
    ]  # fmt: skip
    courses: list[tuple] = []
    for dept_id, (_, prefix, topics) in enumerate(DEPARTMENTS, start=1):
        staff = [p[0] for p in professors if p[2] == dept_id and p[0] % 13] or [1]
        for n, (level, topic) in enumerate((lv, tp) for tp in topics for lv in LEVELS):
            if rng.random() < 0.75:
                code = f"{prefix}{100 + 100 * LEVELS.index(level) + n}"
                courses.append((len(courses) + 1, code, f"{level} {topic}", dept_id,
                                rng.choice(staff), rng.choice((3, 3, 4, 4, 5, 6))))  # fmt: skip
    enrollments: list[tuple] = []
    for student_id in range(1, 1501):
        if student_id % 50 == 0:
            continue  # on leave: enrolled in nothing
        for course in rng.sample(courses, rng.randint(2, 6)):
            enrollments.append((len(enrollments) + 1, student_id, course[0],
                                rng.choice(SEMESTERS), words.weighted(rng, GRADES)))  # fmt: skip
    return {"departments": departments, "professors": professors, "students": students,
            "courses": courses, "enrollments": enrollments}  # fmt: skip


ENTITIES = (
    Entity("departments", "department", "departments", "name",
           cats=(Cat("building", "building", "buildings", "are located in the {v}"),),
           nums=(Num("budget", "budget", total=True),)),
    Entity("professors", "professor", "professors", "name", rel="who",
           cats=(Cat("rank", "rank", "ranks", "have the rank '{v}'"),),
           nums=(Num("salary", "salary", total=True), Num("hire_year", "hire year"))),
    Entity("students", "student", "students", "name", rel="who",
           cats=(Cat("city", "city", "cities", "live in {v}"),),
           nums=(Num("gpa", "GPA"), Num("enrollment_year", "enrollment year"))),
    Entity("courses", "course", "courses", "title", "titles", quoted=True,
           nums=(Num("credits", "number of credits", total=True),)),
    Entity("enrollments", "enrollment", "enrollments",
           cats=(Cat("grade", "grade", "grades", "have the grade '{v}'"),
                 Cat("semester", "semester", "semesters", "are in the {v} semester"))),
)  # fmt: skip

_MAJOR = "FROM students JOIN departments ON students.major_id = departments.id"
_STAFF = "FROM professors JOIN departments ON professors.department_id = departments.id"
_TAUGHT = "FROM courses JOIN professors ON courses.professor_id = professors.id"
_TAKES = (
    "FROM students JOIN enrollments ON enrollments.student_id = students.id "
    "JOIN courses ON enrollments.course_id = courses.id"
)
_DEPTS = "SELECT name FROM departments"
_TEACHERS = f"SELECT DISTINCT professors.name {_TAUGHT}"
_CODES = "SELECT code FROM courses GROUP BY code HAVING COUNT(*) = 1"
_STUDENTS = "SELECT name FROM students GROUP BY name HAVING COUNT(*) = 1"

TEMPLATES = (
    medium("How many students major in {d}?",
           f"SELECT COUNT(*) {_MAJOR} WHERE departments.name = '{{d}}'", d=_DEPTS),
    medium("How many professors work in the {d} department?",
           f"SELECT COUNT(*) {_STAFF} WHERE departments.name = '{{d}}'", d=_DEPTS),
    medium("What are the names of the professors in the {d} department?",
           f"SELECT professors.name {_STAFF} WHERE departments.name = '{{d}}'", d=_DEPTS),
    medium("What is the average GPA of students majoring in {d}?",
           f"SELECT AVG(students.gpa) {_MAJOR} WHERE departments.name = '{{d}}'", d=_DEPTS),
    medium("Which courses does professor {p} teach? Give their titles.",
           f"SELECT courses.title {_TAUGHT} WHERE professors.name = '{{p}}'", p=_TEACHERS),
    medium("Who teaches the course with code {c}?",
           f"SELECT professors.name {_TAUGHT} WHERE courses.code = '{{c}}'", c=_CODES),
    medium("How many students are enrolled in the course with code {c}?",
           "SELECT COUNT(*) FROM enrollments JOIN courses ON enrollments.course_id = courses.id "
           "WHERE courses.code = '{c}'", c=_CODES),
    most("Which department has the most students majoring in it?", "departments.name", _MAJOR,
         "students.major_id"),
    medium("What is the average salary of professors in each department?",
           f"SELECT departments.name, AVG(professors.salary) {_STAFF} GROUP BY departments.id, departments.name"),
    medium("How many courses does the {d} department offer?",
           "SELECT COUNT(*) FROM courses JOIN departments ON courses.department_id = "
           "departments.id WHERE departments.name = '{d}'", d=_DEPTS),
    hard("What are the titles of the courses taken by the student {s}?",
         f"SELECT courses.title {_TAKES} WHERE students.name = '{{s}}'", s=_STUDENTS),
    hard("Which professors do not teach any course?",
         "SELECT name FROM professors WHERE id NOT IN (SELECT professor_id FROM courses)"),
    hard("How many students are not enrolled in any course?",
         "SELECT COUNT(*) FROM students WHERE id NOT IN (SELECT student_id FROM enrollments)"),
    more_than("Which professors teach more than {k} courses?", "professors.name", _TAUGHT,
              "courses.professor_id", k=(2, 3, 4)),
    hard("What are the codes of the {k} courses with the most enrollments?",
         "SELECT courses.code FROM courses JOIN enrollments ON enrollments.course_id = "
         "courses.id GROUP BY courses.id, courses.code ORDER BY COUNT(*) DESC LIMIT {k}",
         keys="SELECT COUNT(*) FROM enrollments GROUP BY course_id ORDER BY 1 DESC", k=(3, 5)),
    hard("Which students got the grade '{g}' in the course with code {c}?",
         f"SELECT students.name {_TAKES} WHERE courses.code = '{{c}}' "
         "AND enrollments.grade = '{g}'", c=_CODES, g=tuple(GRADES)),
    hard("Which departments have an average student GPA above {x}?",
         f"SELECT departments.name {_MAJOR} GROUP BY departments.id, departments.name HAVING AVG(students.gpa) > {{x}}",
         x=(2.9, 3.0, 3.05)),
    hard("How many students majoring in {d} have a GPA above the average GPA of all students?",
         f"SELECT COUNT(*) {_MAJOR} WHERE departments.name = '{{d}}' "
         "AND students.gpa > (SELECT AVG(gpa) FROM students)", d=_DEPTS),
    hard("How many professors earn more than the average salary of their own department?",
         "SELECT COUNT(*) FROM professors AS p WHERE p.salary > (SELECT AVG(q.salary) FROM "
         "professors AS q WHERE q.department_id = p.department_id)"),
    hard("How many credits in total is the student {s} taking?",
         f"SELECT SUM(courses.credits) {_TAKES} WHERE students.name = '{{s}}'", s=_STUDENTS),
)  # fmt: skip
