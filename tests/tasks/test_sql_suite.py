"""The bundled SQL suite: real SQLite files, every gold query run against them."""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import re
import sqlite3
from pathlib import Path

import pytest

import tasks.sql as sql_suite
from environments.sql import SQLEnv
from tasks.sql import (
    DATABASES,
    VERSION,
    build_all,
    convention,
    database_path,
    load_suite,
    schema_text,
)
from tasks.sql.questions import MAX_ROWS

TRAIN_SHA256 = "a45e527341a17811234ed5fa1f453c9c07e482dc111920def8bc727406167462"
"""The train split, one `json.dumps(asdict(task), sort_keys=True)` line per task, in order.
The pinned training metrics and the warm-up's data rest on it: new databases and new
phrasings go to dev and test only."""


@pytest.fixture(scope="module", autouse=True)
def cache(tmp_path_factory: pytest.TempPathFactory):
    """A private cache dir for this module, so the user's ~/.cache is never touched."""
    with pytest.MonkeyPatch.context() as mp:
        path = tmp_path_factory.mktemp("skyrl-cache")
        mp.setenv("SKYRL_CACHE_DIR", str(path))
        yield path


def _connect(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)


def _row_counts(path: Path) -> dict[str, int]:
    conn = _connect(path)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {t: conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in tables}
    finally:
        conn.close()


# ----------------------------------------------------------------------------- questions


def test_every_gold_query_executes_and_almost_all_return_rows():
    suite = load_suite(None)
    conns = {name: _connect(database_path(name)) for name in DATABASES}
    empty = []
    for task in suite:
        rows = conns[task.metadata["database"]].execute(task.answer).fetchall()  # raises if bad
        if not rows or rows == [(None,)]:
            empty.append(task.id)
    for conn in conns.values():
        conn.close()
    assert len(empty) <= 0.05 * len(suite), empty


def test_suite_size_difficulties_and_ids():
    suite = load_suite(None)
    assert len(suite) >= 400
    difficulties = collections.Counter(t.metadata["difficulty"] for t in suite)
    assert set(difficulties) == {"easy", "medium", "hard"}
    assert difficulties["easy"] >= 0.25 * len(suite)
    ids = [t.id for t in suite]
    assert len(set(ids)) == len(ids)
    for task in suite:
        assert re.fullmatch(rf"sql-{task.metadata['database']}-\d{{4}}", task.id)
        assert task.env == "sql"
        assert isinstance(task.prompt, str) and task.prompt[-1] in "?."
        assert task.answer.startswith("SELECT ")
        assert set(task.metadata) == {"database", "difficulty"}


def test_easy_questions_are_single_table():
    easy = [t for t in load_suite(None) if t.metadata["difficulty"] == "easy"]
    assert all(" JOIN " not in t.answer and "(SELECT" not in t.answer for t in easy)


def test_questions_quote_values_exactly_as_the_sql_uses_them():
    # A small model must be able to copy every string literal from the question.
    for task in load_suite(None):
        for literal in re.findall(r"= '([^']*)'", task.answer):
            assert literal in task.prompt, (task.id, literal, task.prompt)


def test_splits_hold_out_databases_and_dev_is_sized_for_evaluation():
    by_split = {s: load_suite(s) for s in ("train", "dev", "test")}
    assert sum(len(v) for v in by_split.values()) == len(load_suite(None))
    dbs = {s: {t.metadata["database"] for t in v} for s, v in by_split.items()}
    assert dbs["dev"] - dbs["train"], "dev must contain a database train never shows"
    assert dbs["test"] - dbs["train"] - dbs["dev"], "test should have its own database"
    dev = by_split["dev"]
    assert 60 <= len(dev) <= 120
    assert sum(t.metadata["difficulty"] == "easy" for t in dev) >= 0.3 * len(dev)
    assert all(t.split == s for s, v in by_split.items() for t in v)


def test_the_train_split_is_pinned_byte_for_byte():
    lines = "".join(
        json.dumps(dataclasses.asdict(t), sort_keys=True) + "\n" for t in load_suite("train")
    )
    assert hashlib.sha256(lines.encode()).hexdigest() == TRAIN_SHA256


def _train_conventions() -> set[str]:
    return {convention(t.metadata["database"]) for t in load_suite("train")}


def test_dev_and_test_each_hold_a_database_named_unlike_every_train_database():
    seen = _train_conventions()
    assert seen == {"plural snake_case"}
    train_tables = {line.split("(")[0] for t in load_suite("train") for line in _schema_lines(t)}
    for split in ("dev", "test"):
        new = {t.metadata["database"] for t in load_suite(split)} - {
            t.metadata["database"] for t in load_suite("train")
        }
        unlike = [db for db in new if convention(db) not in seen]
        assert unlike, f"{split} has no database whose naming convention train lacks"
        for db in unlike:  # the schema itself, not only its label, is named otherwise
            tables = [line.split("(")[0] for line in schema_text(db).splitlines() if "(" in line]
            assert not set(tables) & train_tables
            assert not any(table.endswith("s") for table in tables), (db, tables)


def _schema_lines(task) -> list[str]:
    return [ln for ln in schema_text(task.metadata["database"]).splitlines() if "(" in ln]


def _new_tasks() -> list:
    seen = _train_conventions()
    return [t for t in load_suite(None) if convention(t.metadata["database"]) not in seen]


def test_every_task_of_the_new_databases_has_a_non_empty_deterministic_gold(tmp_path: Path):
    """Each gold returns the same rows from two independent builds (not empty, not a lone 0
    or NULL, at most MAX_ROWS), and the SQL environment gives it full reward."""
    tasks = _new_tasks()
    assert len(tasks) >= 60 and {t.split for t in tasks} == {"dev", "test"}
    build_all(tmp_path)
    env = SQLEnv()
    for task in tasks:
        name = task.metadata["database"]
        first = _connect(database_path(name)).execute(task.answer).fetchall()
        again = _connect(tmp_path / f"{name}.sqlite").execute(task.answer).fetchall()
        assert first == again, task.id
        assert 0 < len(first) <= MAX_ROWS, task.id
        assert first not in ([(None,)], [(0,)]), task.id
        env.reset(options={"task": task})
        _, reward, done, _, info = env.step(f"<solution>{task.answer}</solution>")
        assert done and reward == 1.0 and info["correct"], (task.id, info)
    env.close()


def test_the_new_databases_word_their_questions_otherwise():
    reworded = ("Count the ", "Give the ", "Compute the ", "Look up ", "For the ", "Name the ",
                "Show the ", "Which different ", "On average", "For every ", "In how many ",
                "What is the maximum ", "What is the minimum ", "What is the number of ")  # fmt: skip # a table of values, laid out by hand
    assert not any(t.prompt.startswith(reworded) for t in load_suite("train"))
    new = _new_tasks()
    assert sum(t.prompt.startswith(reworded) for t in new) >= 0.2 * len(new)


def test_load_suite_is_deterministic(monkeypatch: pytest.MonkeyPatch):
    first = load_suite(None)
    monkeypatch.setattr(sql_suite, "_suite", None)  # force a regeneration from the files
    assert load_suite(None) == first
    assert load_suite("dev") == [t for t in first if t.split == "dev"]


def test_bad_split_names_the_accepted_ones():
    with pytest.raises(ValueError, match="accepted: train, dev, test"):
        load_suite("validation")


# ----------------------------------------------------------------------------- databases


def test_databases_are_realistic():
    assert len(DATABASES) >= 4
    for name in DATABASES:
        path = database_path(name)
        assert path.stat().st_size < 2 * 1024 * 1024
        counts = _row_counts(path)
        assert len(counts) >= 4, name
        assert max(counts.values()) >= 100, (name, counts)
        conn = _connect(path)
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        conn.close()


def test_rebuild_is_byte_identical(tmp_path: Path):
    build_all(tmp_path / "a")
    build_all(tmp_path / "b")
    for name in DATABASES:
        a, b = tmp_path / "a" / f"{name}.sqlite", tmp_path / "b" / f"{name}.sqlite"
        assert a.read_bytes() == b.read_bytes(), name
        assert a.read_bytes() == database_path(name).read_bytes(), name
        dump = "\n".join(_connect(a).iterdump())
        assert (
            hashlib.sha256(dump.encode()).hexdigest()
            == hashlib.sha256("\n".join(_connect(b).iterdump()).encode()).hexdigest()
        )
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == sorted(
        f"{n}.sqlite" for n in DATABASES
    ), "no temp build folder is left behind"


def test_database_path_builds_into_cache_and_rebuilds_a_missing_file(cache: Path):
    path = database_path("hospital")
    assert path == cache / "sql" / VERSION / "hospital.sqlite"
    path.unlink()
    assert database_path("hospital").exists()


def test_database_path_accepts_an_existing_file_and_rejects_unknown_names(tmp_path: Path):
    own = tmp_path / "mine.db"
    sqlite3.connect(own).close()
    assert database_path(str(own)) == own
    with pytest.raises(ValueError, match="unknown database 'shop'; known: bookshop, university"):
        database_path("shop")


def test_schema_text_is_compact_and_names_foreign_keys(tmp_path: Path):
    text = schema_text("hospital")
    lines = text.splitlines()
    assert "patients(id INTEGER PRIMARY KEY, name TEXT, gender TEXT, birth_year INTEGER, " in text
    assert "appointments.patient_id -> patients.id" in lines
    assert sum("(" in line for line in lines) == 5
    assert len(text) < 1200
    own = tmp_path / "own.db"
    conn = sqlite3.connect(own)
    conn.executescript(
        "CREATE TABLE a (id INTEGER PRIMARY KEY, x REAL);"
        "CREATE TABLE b (k TEXT, a_id INTEGER REFERENCES a);"
    )
    conn.close()
    assert (
        schema_text(str(own))
        == "a(id INTEGER PRIMARY KEY, x REAL)\nb(k TEXT, a_id INTEGER)\nb.a_id -> a.id"
    )
