"""The bundled SQL suite: seeded SQLite databases and English questions with gold SQL.

Everything is generated here from word lists and a fixed seed (no download), so every
machine builds byte-identical databases and the same questions:

    from tasks.sql import load_suite, schema_text
    task = load_suite("dev")[0]        # id, prompt (the question), answer (gold SQL)
    schema_text(task.metadata["database"])   # the compact schema a prompt shows the model

Databases are built on first use into `<cache>/sql/v2/`. Each is a row builder here
(`<name>.py`) and a data file (`data/<name>.json`: schema, value lists, questions; see
`tasks.sql.domains`). `bookshop`, `university` and `airline` split their questions 80/10/10
train/dev/test, difficulty by difficulty; the rest are held out whole, `hospital` and
`weather` in dev, `music` and `lending` in test. Every train database names its tables in
the plural and its columns in snake_case; `weather` (singular tables, abbreviated columns:
`station.temp_c`) and `lending` (singular tables, camelCase columns: `member.fullName`) do
not, and their questions are reworded (`data/phrasings.json`), so dev and test measure
reading the schema, not recalling a naming habit (`convention(name)` says which is which).

The splits `transfer-train`, `transfer-dev` and `transfer-test` (the `sql_transfer` recipe)
are `tasks.sql.transfer`: the train databases rendered in many naming conventions, and two
more held-out databases (`zoo`, `league`). They leave the three splits above as they are.
"""

from __future__ import annotations

import os
import random
import shutil
import sqlite3
import tempfile
from pathlib import Path
from types import ModuleType

from tasks.cache import cache_dir
from tasks.sql import airline, bookshop, domains, hospital, lending, music, university, weather
from tasks.sql.questions import DIFFICULTIES, assign_splits, entity_templates, generate
from tasks.task import Task

VERSION = "v2"
"""Bump when the generator changes, so old caches are not mistaken for new ones."""

_DOMAINS: dict[str, ModuleType] = {
    "bookshop": bookshop,
    "university": university,
    "airline": airline,
    "hospital": hospital,
    "music": music,
    "weather": weather,
    "lending": lending,
}
"""database -> its row builder; everything else about it is in `data/<name>.json`. New
databases go last: the order fixes the suite's order, and the train split must not move."""
DATABASES: tuple[str, ...] = tuple(_DOMAINS)
SPLITS = ("train", "dev", "test")
ALL_SPLITS = (*SPLITS, "transfer-train", "transfer-dev", "transfer-test")

_suite: list[Task] | None = None
_transfer: dict[str, list[Task]] = {}


def database_path(name: str) -> Path:
    """Path of a bundled database (built on first use), or `name` itself if it is a file."""
    if name in _DOMAINS:
        folder = cache_dir() / "sql" / VERSION
        path = folder / f"{name}.sqlite"
        if not path.exists():
            build_all(folder)
        return path
    from tasks.sql import transfer

    if transfer.is_transfer_database(name):
        return transfer.database_path(name)
    if Path(name).is_file():
        return Path(name)
    raise ValueError(f"unknown database '{name}'; known: {', '.join(DATABASES)}")


def convention(name: str) -> str:
    """How a bundled database names its tables and columns, e.g. "plural snake_case"
    (a transfer rendering such as `bookshop~singular-camel-tid` too)."""
    from tasks.sql import transfer

    return transfer.convention(name)


def duckdb_folder() -> Path:
    """Where `env.kwargs.dsn=duckdb:` keeps the DuckDB copies of the bundled databases."""
    return cache_dir() / "sql" / VERSION / "duckdb"


def duckdb_path(name: str, folder: Path | None = None) -> Path:
    """A bundled database as a DuckDB file in `folder` (default `duckdb_folder()`), copied
    from its SQLite file on first use (`tasks.sql.materialise`)."""
    from tasks.sql.materialise import to_duckdb

    if name not in _DOMAINS:
        raise ValueError(f"unknown database '{name}'; known: {', '.join(DATABASES)}")
    path = (folder or duckdb_folder()) / f"{name}.duckdb"
    if not path.exists():
        to_duckdb(database_path(name), path)
    return path


def build_all(folder: Path) -> None:
    """Build every bundled database into folder, atomically per file.

    Each file is written in a private temp dir and moved in with os.replace, so a reader
    sees a complete database or none, and two processes racing write identical bytes.
    """
    folder.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=folder))
    try:
        for name in DATABASES:
            build_database(name, tmp / f"{name}.sqlite")
        for name in DATABASES:
            os.replace(tmp / f"{name}.sqlite", folder / f"{name}.sqlite")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def build_database(name: str, path: Path) -> None:
    """Create one bundled database at path from its schema and seeded rows."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA foreign_keys = ON")  # the seeded rows must respect them
        conn.executescript(domains.load(name).schema)
        rows = _builder(name).build_rows(random.Random(f"skyrl-sql-{VERSION}-{name}"))
        table, column = domains.load(name).nulled
        index = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")].index(column)
        blank = random.Random(f"skyrl-sql-{VERSION}-{name}-nulls")
        rows[table] = [
            (*r[:index], None, *r[index + 1 :]) if blank.random() < 0.08 else r for r in rows[table]
        ]
        for table, table_rows in rows.items():
            marks = ", ".join("?" * len(table_rows[0]))
            conn.executemany(f"INSERT INTO {table} VALUES ({marks})", table_rows)
        conn.commit()
    finally:
        conn.close()


def _builder(name: str) -> ModuleType:
    from tasks.sql import transfer

    return _DOMAINS.get(name) or transfer.EXTRA[name]


def schema_text(name_or_path: str) -> str:
    """Compact schema for prompts: one `table(col TYPE, ...)` line per table, then one
    `table.col -> other.col` line per foreign key."""
    uri = f"{database_path(name_or_path).resolve().as_uri()}?mode=ro"
    conn = sqlite3.connect(uri, uri=True)
    try:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' "
                "AND name NOT LIKE 'sqlite_%' ORDER BY rowid"
            )
        ]
        lines, links = [], []
        for table in tables:
            columns = conn.execute(f'PRAGMA table_info("{table}")').fetchall()
            cols = [f"{c[1]} {c[2]}".strip() + (" PRIMARY KEY" if c[5] else "") for c in columns]
            lines.append(f"{table}({', '.join(cols)})")
            order = {c[1]: c[0] for c in columns}
            fks = conn.execute(f'PRAGMA foreign_key_list("{table}")').fetchall()
            for fk in sorted(fks, key=lambda fk: order.get(fk[3], 0)):
                parent, child_col, parent_col = fk[2], fk[3], fk[4]
                if parent_col is None:  # REFERENCES parent: its primary key
                    pks = conn.execute(f'PRAGMA table_info("{parent}")').fetchall()
                    parent_col = next((c[1] for c in pks if c[5]), "rowid")
                links.append(f"{table}.{child_col} -> {parent}.{parent_col}")
        return "\n".join(lines + links)
    finally:
        conn.close()


def load_suite(split: str | None = None) -> list[Task]:
    """The bundled questions of one split (`train`, `dev`, `test`, or a `transfer-` one),
    or all of the first three for None."""
    if split is not None and split not in ALL_SPLITS:
        raise ValueError(
            f"unknown split '{split}'; accepted: {', '.join(ALL_SPLITS)} (or None for all)"
        )
    global _suite
    if _suite is None:
        _suite = [task for name in DATABASES for task in _database_tasks(name)]
    if split in ALL_SPLITS and split not in SPLITS:
        from tasks.sql import transfer

        if split not in _transfer:
            bundled = {s: [t for t in _suite if t.split == s] for s in SPLITS}
            extra = [t for name in transfer.EXTRA for t in _database_tasks(name)]
            _transfer[split] = transfer.suite(split, bundled, extra)
        return list(_transfer[split])
    return [t for t in _suite if split is None or t.split == split]


def _database_tasks(name: str) -> list[Task]:
    domain = domains.load(name)
    shared = [t for e in domain.entities for t in entity_templates(e)]
    uri = f"{database_path(name).resolve().as_uri()}?mode=ro"
    conn = sqlite3.connect(uri, uri=True)
    try:
        seed = f"skyrl-sql-{VERSION}-{name}-questions"
        filled = generate(conn, shared, list(domain.templates), domain.quotas, seed)
    finally:
        conn.close()
    splits: list[str] = []
    for difficulty in DIFFICULTIES:
        n = sum(1 for f in filled if f[0] == difficulty)
        splits += assign_splits(n, domain.split, seed=f"skyrl-sql-{VERSION}-{name}-{difficulty}")
    if domain.phrasings:  # same SQL, other words: the seed is the question's own id
        filled = [(d, domains.reword(q, f"{seed}-{i}"), s) for i, (d, q, s) in enumerate(filled)]
    return [
        Task(
            id=f"sql-{name}-{i:04d}",
            env="sql",
            prompt=question,
            answer=sql,
            split=split,
            metadata={"database": name, "difficulty": difficulty},
        )
        for i, ((difficulty, question, sql), split) in enumerate(zip(filled, splits, strict=True))
    ]
