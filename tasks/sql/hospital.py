"""The hospital database: doctors, patients, appointments, medications, prescriptions.

Held out: its questions are all in `dev`, so dev measures transfer to an unseen schema.
"""

from __future__ import annotations

import random

from tasks.sql import words
from tasks.sql.questions import Cat, Entity, Num, hard, medium, most

SCHEMA = """
CREATE TABLE doctors (
    id INTEGER PRIMARY KEY, name TEXT NOT NULL, specialty TEXT, years_experience INTEGER
);
CREATE TABLE patients (
    id INTEGER PRIMARY KEY, name TEXT NOT NULL, gender TEXT, birth_year INTEGER, city TEXT,
    blood_type TEXT
);
CREATE TABLE appointments (
    id INTEGER PRIMARY KEY, patient_id INTEGER REFERENCES patients(id),
    doctor_id INTEGER REFERENCES doctors(id), appointment_date TEXT, reason TEXT, status TEXT
);
CREATE TABLE medications (
    id INTEGER PRIMARY KEY, name TEXT NOT NULL, category TEXT, unit_cost REAL
);
CREATE TABLE prescriptions (
    id INTEGER PRIMARY KEY, appointment_id INTEGER REFERENCES appointments(id),
    medication_id INTEGER REFERENCES medications(id), dosage_mg INTEGER, days INTEGER
);
"""

SPECIALTIES = ("Cardiology", "Dermatology", "Neurology", "Pediatrics", "Oncology",
               "Orthopedics", "General Practice", "Psychiatry")  # fmt: skip
BLOOD_TYPES = {"O+": 38, "A+": 34, "B+": 9, "AB+": 3, "O-": 7, "A-": 6, "B-": 2, "AB-": 1}
REASONS = ("checkup", "follow-up", "vaccination", "pain", "fever", "injury", "test results")
STATUSES = {"completed": 75, "cancelled": 10, "no-show": 5, "scheduled": 10}
# (medication, category, typical dose in mg)
MEDICATIONS = (
    ("Amoxicillin", "Antibiotic", 500), ("Azithromycin", "Antibiotic", 250),
    ("Ciprofloxacin", "Antibiotic", 500), ("Doxycycline", "Antibiotic", 100),
    ("Ibuprofen", "Painkiller", 400), ("Paracetamol", "Painkiller", 500),
    ("Naproxen", "Painkiller", 250), ("Tramadol", "Painkiller", 50),
    ("Lisinopril", "Blood Pressure", 10), ("Amlodipine", "Blood Pressure", 5),
    ("Losartan", "Blood Pressure", 50), ("Metoprolol", "Blood Pressure", 50),
    ("Atorvastatin", "Cholesterol", 20), ("Simvastatin", "Cholesterol", 20),
    ("Metformin", "Diabetes", 500), ("Insulin Glargine", "Diabetes", 10),
    ("Sertraline", "Antidepressant", 50), ("Fluoxetine", "Antidepressant", 20),
    ("Citalopram", "Antidepressant", 20), ("Cetirizine", "Antihistamine", 10),
    ("Loratadine", "Antihistamine", 10), ("Omeprazole", "Antacid", 20),
    ("Pantoprazole", "Antacid", 40), ("Salbutamol", "Asthma", 2), ("Levothyroxine", "Thyroid", 1),
    ("Prednisone", "Steroid", 10), ("Warfarin", "Anticoagulant", 5), ("Gabapentin", "Nerve Pain", 300),
)  # fmt: skip


def build_rows(rng: random.Random) -> dict[str, list[tuple]]:
    """All rows, table by table in insertion order. The last medication is never
    prescribed and a few patients have never had an appointment."""
    doctors = [
        (i, f"Dr. {name}", rng.choice(SPECIALTIES), rng.randint(1, 35))
        for i, name in enumerate(words.distinct(rng, words.person, 80), start=1)
    ]
    cities = [city for city, _ in words.CITIES[:20]]
    patients = [
        (i, words.person(rng), rng.choice(("female", "male")), rng.randint(1935, 2022),
         rng.choice(cities), words.weighted(rng, BLOOD_TYPES))
        for i in range(1, 1201)
    ]  # fmt: skip
    appointments = [
        (i, rng.randint(1, 1170), rng.randint(1, 80), words.date(rng, 2022, 2024),
         rng.choice(REASONS), words.weighted(rng, STATUSES))
        for i in range(1, 3501)
    ]  # fmt: skip
    medications = [
        (i, name, category, round(rng.uniform(0.05, 4.0), 2))
        for i, (name, category, _) in enumerate(MEDICATIONS, start=1)
    ]
    prescriptions: list[tuple] = []
    for appointment in appointments:
        if appointment[5] != "completed" or rng.random() < 0.1:
            continue
        med = rng.randint(1, len(MEDICATIONS) - 1)
        dose = MEDICATIONS[med - 1][2] * rng.choice((1, 1, 2))
        prescriptions.append((len(prescriptions) + 1, appointment[0], med, dose,
                              rng.choice((3, 5, 7, 10, 14, 30))))  # fmt: skip
    return {"doctors": doctors, "patients": patients, "appointments": appointments,
            "medications": medications, "prescriptions": prescriptions}  # fmt: skip


ENTITIES = (
    Entity("doctors", "doctor", "doctors", "name", rel="who",
           cats=(Cat("specialty", "specialty", "specialties", "specialize in {v}"),),
           nums=(Num("years_experience", "number of years of experience"),)),
    Entity("patients", "patient", "patients", "name", rel="who",
           cats=(Cat("city", "city", "cities", "live in {v}"),
                 Cat("blood_type", "blood type", "blood types", "have blood type {v}")),
           nums=(Num("birth_year", "birth year"),)),
    Entity("appointments", "appointment", "appointments",
           cats=(Cat("status", "status", "statuses", "have the status '{v}'"),
                 Cat("reason", "reason", "reasons", "were made for the reason '{v}'"))),
    Entity("medications", "medication", "medications", "name", rel="that",
           cats=(Cat("category", "category", "categories", "belong to the {v} category"),),
           nums=(Num("unit_cost", "unit cost"),)),
    Entity("prescriptions", "prescription", "prescriptions",
           nums=(Num("days", "duration in days"),)),
)  # fmt: skip

_SEEN = "FROM appointments JOIN doctors ON appointments.doctor_id = doctors.id"
_VISITS = "FROM appointments JOIN patients ON appointments.patient_id = patients.id"
_PRESCRIBED = "FROM prescriptions JOIN medications ON prescriptions.medication_id = medications.id"
_DOCTORS = "SELECT name FROM doctors"
_PATIENTS = (
    f"SELECT patients.name {_VISITS} GROUP BY patients.name HAVING COUNT(DISTINCT patients.id) = 1"
)

TEMPLATES = (
    medium("How many appointments has {d} had?",
           f"SELECT COUNT(*) {_SEEN} WHERE doctors.name = '{{d}}'", d=_DOCTORS),
    medium("How many appointments has the patient {p} had?",
           f"SELECT COUNT(*) {_VISITS} WHERE patients.name = '{{p}}'", p=_PATIENTS),
    medium("How many appointments were with doctors who specialize in {s}?",
           f"SELECT COUNT(*) {_SEEN} WHERE doctors.specialty = '{{s}}'", s=tuple(SPECIALTIES)),
    medium("How many times has {m} been prescribed?",
           f"SELECT COUNT(*) {_PRESCRIBED} WHERE medications.name = '{{m}}'",
           m="SELECT name FROM medications"),
    most("Which doctor has had the most appointments?", "doctors.name", _SEEN,
         "appointments.doctor_id"),
    medium("How many appointments took place in {y}?",
           "SELECT COUNT(*) FROM appointments WHERE strftime('%Y', appointment_date) = '{y}'",
           y=("2022", "2023", "2024")),
    hard("Which medications have never been prescribed?",
         "SELECT name FROM medications WHERE id NOT IN (SELECT medication_id FROM prescriptions)"),
    hard("How many patients have never had an appointment?",
         "SELECT COUNT(*) FROM patients WHERE id NOT IN (SELECT patient_id FROM appointments)"),
    hard("Which doctors have had more than {k} appointments with the status '{s}'?",
         f"SELECT doctors.name {_SEEN} WHERE appointments.status = '{{s}}' "
         "GROUP BY doctors.id, doctors.name HAVING COUNT(*) > {k}",
         s=tuple(STATUSES), k=(5, 10, 30, 40)),
    hard("Which medications were prescribed to the patient {p}?",
         f"SELECT DISTINCT medications.name {_PRESCRIBED} JOIN appointments ON "
         "prescriptions.appointment_id = appointments.id JOIN patients ON "
         "appointments.patient_id = patients.id WHERE patients.name = '{p}'", p=_PATIENTS),
    hard("Which medication category has been prescribed the most?",
         f"SELECT medications.category {_PRESCRIBED} GROUP BY medications.category "
         "ORDER BY COUNT(*) DESC LIMIT 1",
         keys=f"SELECT COUNT(*) {_PRESCRIBED} GROUP BY medications.category ORDER BY 1 DESC"),
    hard("How many patients who live in {c} have seen a doctor who specializes in {s}?",
         f"SELECT COUNT(DISTINCT patients.id) {_VISITS} JOIN doctors ON "
         "appointments.doctor_id = doctors.id "
         "WHERE patients.city = '{c}' AND doctors.specialty = '{s}'",
         c="SELECT DISTINCT city FROM patients", s=tuple(SPECIALTIES)),
)  # fmt: skip
