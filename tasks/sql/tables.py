"""The tables of a SQLite file, read with a plain read-only connection.

For our own fixed statements on task databases (copying them to other drivers, writing a
schema), never for an episode's queries: those go through the SQL environment's guard.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def sqlite_tables(path: Path) -> Iterator[tuple[sqlite3.Connection, list[str]]]:
    """A plain read-only connection to a SQLite file (for our own fixed statements, not an
    episode's queries) and its table names in creation order."""
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        names = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' "
                "AND name NOT LIKE 'sqlite_%' ORDER BY rowid"
            )
        ]
        yield conn, names
    finally:
        conn.close()


SESSION_FUNCTIONS = (
    "set_config",
    "pg_cancel_backend",
    "pg_terminate_backend",
    "pg_stat_get_activity",
    "pg_stat_get_backend_activity",
)
"""Functions PUBLIC may no longer run in the database (every overload): a query that could
call them would turn its own time limit off (`set_config('statement_timeout', '0', true)`),
read other sessions' SQL (gold queries run on the same role) or cancel and terminate them.
`PostgresDriver` refuses a reader that still may; `tasks.sql.materialise` revokes them."""
