"""Spider- and BIRD-format folders as SQL tasks (`--tasks FOLDER`), laid out as their downloads:

    Spider: tables.json, train_spider.json, train_others.json, dev.json, [test.json],
            database/<db_id>/<db_id>.sqlite   (test.json: test_database/<db_id>/...)
    BIRD:   dev.json and/or train.json (question, evidence, SQL, difficulty),
            dev_databases/<db_id>/<db_id>.sqlite, train_databases/<db_id>/<db_id>.sqlite

Each question becomes a Task whose `metadata.database` is the SQLite file. The prompt shows
the schema as the SkyRL-SQL and Spider recipes do: CREATE TABLE statements plus 3 example
rows of each table (`metadata.schema_format`, `metadata.sample_rows`; env.kwargs
`schema_format`/`sample_rows` override them). BIRD's `evidence` follows the question, and
BIRD tasks are graded by BIRD's set rule (`metadata.grader`), Spider's by Spider's.

A folder is a user's data, so it is read as hostile: database ids must be plain names and
every database file must lie inside the folder.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tasks.task import Task

SAMPLE_ROWS = 3
"""Example rows per table in the prompt (Rajkumar et al. 2022's CREATE TABLE + SELECT 3)."""
_DB_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
# file -> (split, database folder) for each layout
SPIDER_FILES = {
    "train_spider.json": ("train", "database"),
    "train_others.json": ("train", "database"),
    "dev.json": ("dev", "database"),
    "test.json": ("test", "test_database"),
}
BIRD_FILES = {"train.json": ("train", "train_databases"), "dev.json": ("dev", "dev_databases")}


def detect(folder: Path) -> str | None:
    """`spider`, `bird`, or None for a folder in neither layout."""
    if (folder / "dev_databases").is_dir() or (folder / "train_databases").is_dir():
        return "bird"
    if (folder / "tables.json").is_file() and (folder / "database").is_dir():
        return "spider"
    return None


def load_folder(folder: str | Path) -> list[Task]:
    """Every question of a Spider- or BIRD-format folder, each with its split."""
    folder = Path(folder)
    kind = detect(folder)
    if kind is None:
        raise ValueError(
            f"{folder} is neither a Spider folder (tables.json, dev.json, database/<db_id>/) "
            "nor a BIRD folder (dev.json, dev_databases/<db_id>/)"
        )
    files = SPIDER_FILES if kind == "spider" else BIRD_FILES
    tasks: list[Task] = []
    for name, (split, databases) in files.items():
        if (folder / name).is_file():
            tasks += _load_file(folder, name, split, databases, kind)
    if not tasks:
        raise ValueError(f"{folder} holds no {kind} questions ({', '.join(files)})")
    return tasks


def _load_file(folder: Path, name: str, split: str, databases: str, kind: str) -> list[Task]:
    where = folder / name
    try:
        rows = json.loads(where.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{where} is not a readable JSON file ({e})") from None
    if not isinstance(rows, list):
        raise ValueError(f"{where} is not a JSON list of questions")
    root = folder.resolve()
    tasks = []
    for i, row in enumerate(rows):
        item = f"{where} item {i + 1}"
        if not isinstance(row, dict):
            raise ValueError(f"{item} is not a JSON object")
        db_id = row.get("db_id")
        gold = row.get("query" if kind == "spider" else "SQL")
        question = row.get("question")
        if not all(isinstance(v, str) for v in (db_id, gold, question)):
            field = "query" if kind == "spider" else "SQL"
            raise ValueError(f"{item} needs the string fields db_id, question and {field}")
        assert isinstance(db_id, str) and isinstance(gold, str) and isinstance(question, str)
        database = _database(root, databases, db_id, item)
        evidence = row.get("evidence")
        prompt = question.strip()
        if kind == "bird" and isinstance(evidence, str) and evidence.strip():
            prompt += f"\nExternal knowledge: {evidence.strip()}"
        metadata: dict[str, Any] = {
            "database": str(database),
            "db_id": db_id,
            "grader": kind,
            "dialect": "sqlite",
            "schema_format": "create",
            "sample_rows": SAMPLE_ROWS,
        }
        if isinstance(row.get("difficulty"), str):
            metadata["difficulty"] = row["difficulty"]
        number = row.get("question_id", i)
        tasks.append(
            Task(
                id=f"{kind}-{Path(name).stem}-{number}",
                env="sql",
                prompt=prompt,
                answer=gold.strip(),
                split=split,
                metadata=metadata,
            )
        )
    return tasks


def _database(root: Path, databases: str, db_id: str, item: str) -> Path:
    """`<root>/<databases>/<db_id>/<db_id>.sqlite`, refused unless a plain file inside root."""
    if not _DB_ID.fullmatch(db_id) or db_id in (".", ".."):
        raise ValueError(f"{item}: db_id {db_id!r} is not a plain name")
    path = root / databases / db_id / f"{db_id}.sqlite"
    if not path.is_file():
        raise ValueError(f"{item}: the database {databases}/{db_id}/{db_id}.sqlite is missing")
    resolved = path.resolve()
    if not resolved.is_relative_to(root):
        raise ValueError(f"{item}: the database {path} leads outside {root}")
    return resolved
