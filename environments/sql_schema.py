"""A database as text, for `skyrl/SQL-v0`: the schema the prompt shows (`compact` or
`create`, with example rows) on any driver, and result tables (`format_table`)."""

from __future__ import annotations

import functools
import re
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from environments.sql_drivers import Target
from environments.sql_guard import QueryError, run_query
from tasks.sql.tables import sqlite_tables

GOLD_TIME_FACTOR = 10
"""Our own statements (the gold query, the schema) get this many times the per-query limit."""
MAX_CELL_CHARS = 80


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bytes):
        return f"<blob {len(value)} bytes>"
    text = repr(round(value, 6)) if isinstance(value, float) else str(value)
    text = text.replace("\r", "\\r").replace("\n", "\\n").replace("\t", " ")
    return text if len(text) <= MAX_CELL_CHARS else text[: MAX_CELL_CHARS - 3] + "..."


def format_table(
    columns: Sequence[str], rows: Sequence[Sequence[Any]], more: bool, max_chars: int = 2000
) -> str:
    """Header, one line per row while they fit in max_chars, and a row-count line."""
    lines = [" | ".join(_cell(c) for c in columns)]
    used = len(lines[0])
    for row in rows:
        line = " | ".join(_cell(v) for v in row)
        if used + len(line) + 50 > max_chars:  # 50: room for the count line
            break
        lines.append(line)
        used += len(line) + 1
    n, shown = len(rows), len(lines) - 1
    if more or shown < n:
        lines.append(f"... ({'more than ' * more}{n} rows; showing {shown})")
    else:
        lines.append(f"({n} row{'s' * (n != 1)})")
    return "\n".join(lines)


SCHEMA_FORMATS = ("compact", "create")


def _quote(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z_]\w*", name) else '"' + name.replace('"', '""') + '"'


def _sqlite_file(target: Target) -> Path | None:
    """The SQLite file whose schema describes the target: its own, or for a bundled database
    on another driver the bundled SQLite file (same tables, so the same prompt)."""
    from tasks import sql as sql_tasks

    if target.kind == "sqlite":
        return Path(target.location)
    name = target.schema if target.kind == "postgresql" else Path(target.location).stem
    if name in sql_tasks.DATABASES and (
        target.kind == "postgresql" or Path(target.location).parent == sql_tasks.duckdb_folder()
    ):
        return sql_tasks.database_path(name)
    return None


def _tables(target: Target, time_limit_s: float) -> list[tuple[str, list[tuple[str, str]]]]:
    """(table, [(column, type)]) of a database, in creation order where the DBMS knows it."""
    sqlite = _sqlite_file(target)
    if sqlite is not None:  # our own fixed statements: a plain read-only connection
        with sqlite_tables(sqlite) as (conn, names):
            return [
                (t, [(c[1], c[2]) for c in conn.execute(f"PRAGMA table_info({_quote(t)})")])
                for t in names
            ]
    sql = (
        "SELECT table_name, column_name, data_type FROM information_schema.columns "
        "WHERE table_schema = current_schema() ORDER BY table_name, ordinal_position"
    )
    _, rows, _ = run_query(target, sql, 5000, time_limit_s * GOLD_TIME_FACTOR)
    tables: dict[str, list[tuple[str, str]]] = {}
    for table, column, kind in rows:
        tables.setdefault(str(table), []).append((str(column), str(kind).upper()))
    return list(tables.items())


@functools.lru_cache(maxsize=64)
def schema(
    target: Target, version: tuple, fmt: str, sample_rows: int, time_limit_s: float
) -> tuple[str, str]:
    """(schema text, first table name for the prompt's example) of a database.

    `compact`: one `table(col TYPE, ...)` line per table and the foreign keys (bundled and
    SQLite databases); `create`: CREATE TABLE statements, as the SkyRL-SQL and Spider recipes
    show them. `sample_rows` > 0 adds that many rows of each table (SELECT * ... LIMIT k)."""
    from tasks import sql as sql_tasks

    tables = _tables(target, time_limit_s)
    first = _quote(tables[0][0]) if tables else "t"
    sqlite = _sqlite_file(target)
    if fmt == "compact" and sqlite is not None:
        parts = [sql_tasks.schema_text(str(sqlite))]
    elif fmt == "create" and sqlite is not None:
        conn = sqlite3.connect(f"{sqlite.resolve().as_uri()}?mode=ro", uri=True)
        try:
            parts = [
                str(r[0]).strip() + ";"
                for r in conn.execute(
                    "SELECT sql FROM sqlite_master WHERE type = 'table' "
                    "AND name NOT LIKE 'sqlite_%' AND sql IS NOT NULL ORDER BY rowid"
                )
            ]
        finally:
            conn.close()
    elif fmt == "create":
        parts = [
            f"CREATE TABLE {_quote(t)} (\n"
            + ",\n".join(f"  {_quote(c)} {k}" for c, k in cols)
            + "\n);"
            for t, cols in tables
        ]
    else:
        parts = [f"{t}({', '.join(f'{c} {k}' for c, k in cols)})" for t, cols in tables]
    if sample_rows > 0:
        for table, _ in tables:
            try:
                columns, rows, _ = run_query(
                    target,
                    f"SELECT * FROM {_quote(table)} LIMIT {int(sample_rows)}",
                    sample_rows,
                    time_limit_s,
                )
            except QueryError:
                continue
            parts.append(
                f"/* {sample_rows} example rows from {table}:\n"
                + format_table(columns, rows, False, 2000)
                + "\n*/"
            )
    return "\n".join(parts), first
