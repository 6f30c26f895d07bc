"""The transfer suite (`sql_transfer` recipe): train databases rendered in many naming
conventions, gold queries rewritten to match, two more held-out databases. Real SQLite:
every rewritten gold query runs on its rendering and returns what the original returns."""

from __future__ import annotations

import collections
import contextlib
import hashlib
import sqlite3
from pathlib import Path

import pytest

from tasks.sql import VERSION, database_path, load_suite, schema_text, transfer

PINNED = {
    "transfer-train": (306, "4e15681b4a2c02636d3c4bb5fb7d7998386ab5bf87dfa8b42deacebd0037eca0"),
    "transfer-dev": (143, "788e7488c077cd8f846e15b324bf3dae6c12367e1aa0161c18500f6578ad7659"),
    "transfer-test": (189, "757ce96249cd70e6793a89266521c23efe1bbfa1b96b88be373b73cff3cadbeb"),
}
"""Tasks per split and the sha256 of their `id<TAB>database<TAB>answer` lines, in order."""


@pytest.fixture(scope="module", autouse=True)
def cache(tmp_path_factory: pytest.TempPathFactory):
    """A private cache dir for this module, so the user's ~/.cache is never touched."""
    with pytest.MonkeyPatch.context() as mp:
        path = tmp_path_factory.mktemp("skyrl-cache")
        mp.setenv("SKYRL_CACHE_DIR", str(path))
        yield path


def _rows(database: str, sql: str) -> list[tuple]:
    conn = sqlite3.connect(f"{database_path(database).resolve().as_uri()}?mode=ro", uri=True)
    try:
        return sorted(conn.execute(sql).fetchall(), key=repr)
    finally:
        conn.close()


def test_every_rewritten_gold_query_returns_what_the_original_returns_on_its_rendering():
    originals = {t.id: t for t in load_suite("train")}
    rendered = load_suite("transfer-train")
    assert len(rendered) == len(originals)
    stale = 0  # the original query still runs on the rendering (e.g. `SELECT COUNT(*) FROM books`)
    for task in rendered:
        base, _, code = task.metadata["database"].partition("~")
        original = originals[task.id.removesuffix(f"-{code}")]
        assert _rows(task.metadata["database"], task.answer) == _rows(base, original.answer), (
            task.id,
            task.answer,
        )
        try:
            _rows(task.metadata["database"], original.answer)
            stale += 1
        except sqlite3.OperationalError:
            pass
    assert stale <= 0.3 * len(rendered), stale  # 89 of 306: the original names mostly fail


def test_renderings_cover_many_conventions_and_none_held_out():
    used = collections.Counter(
        (t.metadata["database"].split("~")[0], t.metadata["database"].split("~")[1])
        for t in load_suite("transfer-train")
    )
    for base in transfer.TRAIN_DATABASES:
        assert len({code for db, code in used if db == base}) >= 10, base
    codes = {code for _, code in used}
    # SQLite compares names case-insensitively: singular camelCase (lending) is singular
    # PascalCase as well; singular abbreviated is weather's.
    assert not {c for c in codes if c.startswith(("singular-camel", "singular-pascal"))}
    assert not {c for c in codes if c.startswith("singular-abbrev")}
    held_out = {"weather", "lending", "zoo", "league"}
    held_tables = {
        line.split("(")[0].lower() for db in held_out for line in schema_text(db).splitlines()
    }
    for db in {t.metadata["database"] for t in load_suite("transfer-train")}:
        tables = {line.split("(")[0].lower() for line in schema_text(db).splitlines()}
        assert not tables & held_tables, db
        assert not any(t.startswith(("t_", "tbl")) for t in tables), db


def test_a_rendering_renames_tables_columns_and_keys():
    text = schema_text("bookshop~singular-prefixed-tid")
    assert text.splitlines()[0] == (
        "author(ath_author_id INTEGER PRIMARY KEY, ath_name TEXT, ath_country TEXT, "
        "ath_birth_year INTEGER)"
    )
    assert "bk_author_id -> author.ath_author_id" in text
    pascal = schema_text("university~plural-pascal-id")
    assert pascal.startswith("Departments(Id INTEGER PRIMARY KEY, Name TEXT, Building TEXT")
    assert "purchase(" in schema_text("bookshop~singular-snake-id")  # `order` is a keyword


def test_renderings_build_into_a_cache_folder_of_their_own(cache: Path):
    path = database_path("airline~plural-abbrev-tid")
    assert path == cache / "sql" / f"{VERSION}-transfer-{transfer.VERSION}" / path.name
    assert not (cache / "sql" / VERSION / path.name).exists()


def test_train_questions_use_synonyms_and_keep_quoted_values():
    originals = {t.id: t for t in load_suite("train")}
    changed = 0
    for task in load_suite("transfer-train"):
        before = originals[task.id.rsplit("-", 3)[0]].prompt
        changed += task.prompt != before
        for value in [p for i, p in enumerate(str(before).split("'")) if i % 2]:
            assert f"'{value}'" in task.prompt, (before, task.prompt)
    assert changed >= 0.3 * len(originals)


def test_dev_and_test_are_todays_plus_a_database_of_unseen_domain_and_convention():
    for split, extra in (("dev", "zoo"), ("test", "league")):
        today = [t.id for t in load_suite(split)]
        mine = load_suite(f"transfer-{split}")
        assert {t.id for t in mine if t.metadata["database"] != extra} == set(today)
        first = {t.metadata["database"] for t in mine[:12]}  # round robin: any eval.limit
        assert first == {t.metadata["database"] for t in mine}, first  # sees every database
        new = [t for t in mine if t.metadata["database"] == extra]
        assert len(new) == len(mine) - len(today) == 30
        assert all(_rows(extra, t.answer) for t in new)
        assert not transfer.convention_seen(extra)
        train_words = {
            w
            for db in transfer.TRAIN_DATABASES
            for w in schema_text(db).lower().replace("(", " ").split()
        }
        tables = [line.split("(")[0] for line in schema_text(extra).splitlines() if "(" in line]
        assert not {t.lower() for t in tables} & train_words, tables
    assert load_suite("train") and len(load_suite("dev")) == 113  # today's splits unmoved


def test_the_transfer_splits_are_pinned():
    for split, (n, sha) in PINNED.items():
        tasks = load_suite(split)
        lines = "".join(f"{t.id}\t{t.metadata['database']}\t{t.answer}\n" for t in tasks)
        assert (len(tasks), hashlib.sha256(lines.encode()).hexdigest()) == (n, sha), split


def test_a_rendering_and_an_extra_database_rebuild_to_the_same_contents():
    def dump(path: Path) -> str:
        with contextlib.closing(sqlite3.connect(path)) as conn:
            return "\n".join(conn.iterdump())

    for name in ("university~plural-abbrev-tid", "league"):
        path = database_path(name)
        first = dump(path)
        path.unlink()
        again = dump(database_path(name))
        assert hashlib.sha256(first.encode()).digest() == hashlib.sha256(again.encode()).digest()
        assert "CREATE TABLE" in first
