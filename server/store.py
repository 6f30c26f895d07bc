"""The server's state in SQLite (`<state-dir>/serve.db`): sessions, models, checkpoints and
samplers, so that a restarted server still knows every `tinker://` path it handed out.

A checkpoint's folder is recorded here when it is written; a `tinker://` path resolves
only through this table, never by joining client text onto a file path.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
  id TEXT PRIMARY KEY, created REAL NOT NULL, heartbeat REAL NOT NULL,
  sdk_version TEXT, metadata TEXT, owner TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS models (
  id TEXT PRIMARY KEY, session_id TEXT NOT NULL, spec TEXT NOT NULL, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS checkpoints (
  path TEXT PRIMARY KEY, model_id TEXT NOT NULL, kind TEXT NOT NULL, dir TEXT NOT NULL,
  created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS samplers (
  id TEXT PRIMARY KEY, base_model TEXT NOT NULL, model_path TEXT, dir TEXT,
  created REAL NOT NULL);
"""


class Store:
    """One connection, serialised by a lock (calls are short)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(_SCHEMA)
        columns = [r[1] for r in self._db.execute("PRAGMA table_info(sessions)")]
        if "owner" not in columns:  # a state file from before clients had owners: no one's
            self._db.execute("ALTER TABLE sessions ADD COLUMN owner TEXT NOT NULL DEFAULT ''")
        self._lock = threading.Lock()

    def _run(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    def add_session(self, sid: str, owner: str, sdk_version: str, metadata: dict[str, Any]) -> None:
        now = time.time()
        self._run(
            "INSERT INTO sessions (id, created, heartbeat, sdk_version, metadata, owner)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (sid, now, now, sdk_version, json.dumps(metadata), owner),
        )

    def session_owner(self, sid: str) -> str | None:
        """The client that created session `sid`, or None when there is no such session."""
        rows = self._run("SELECT owner FROM sessions WHERE id = ?", (sid,))
        return rows[0][0] if rows else None

    def heartbeat(self, sid: str) -> bool:
        with self._lock:
            cur = self._db.execute(
                "UPDATE sessions SET heartbeat = ? WHERE id = ?", (time.time(), sid)
            )
            return cur.rowcount > 0

    def add_model(self, model_id: str, session_id: str, spec: dict[str, Any]) -> None:
        self._run(
            "INSERT OR REPLACE INTO models VALUES (?, ?, ?, ?)",
            (model_id, session_id, json.dumps(spec), time.time()),
        )

    def model(self, model_id: str) -> dict[str, Any] | None:
        rows = self._run("SELECT spec FROM models WHERE id = ?", (model_id,))
        return json.loads(rows[0][0]) if rows else None

    def add_checkpoint(self, path: str, model_id: str, kind: str, directory: Path) -> None:
        self._run(
            "INSERT OR REPLACE INTO checkpoints VALUES (?, ?, ?, ?, ?)",
            (path, model_id, kind, str(directory), time.time()),
        )

    def checkpoint(self, path: str) -> tuple[str, str, Path] | None:
        """(model id, kind, folder) of a `tinker://` path, or None."""
        rows = self._run("SELECT model_id, kind, dir FROM checkpoints WHERE path = ?", (path,))
        return (rows[0][0], rows[0][1], Path(rows[0][2])) if rows else None

    def checkpoints(self, model_id: str) -> list[tuple[str, str, float]]:
        return [
            (r[0], r[1], r[2])
            for r in self._run(
                "SELECT path, kind, created FROM checkpoints WHERE model_id = ? ORDER BY created",
                (model_id,),
            )
        ]

    def sampler_checkpoints(self, owner: str) -> list[str]:
        """The named sampler checkpoints of one client's models (snapshots of
        save_weights_and_get_sampling_client aside)."""
        rows = self._run(
            "SELECT c.path FROM checkpoints c JOIN models m ON m.id = c.model_id"
            " JOIN sessions s ON s.id = m.session_id"
            " WHERE c.kind = 'sampler' AND s.owner = ? ORDER BY c.created",
            (owner,),
        )
        return [r[0] for r in rows if "/sampler_weights/ephemeral-" not in r[0]]

    def add_sampler(
        self, sid: str, base_model: str, model_path: str | None, directory: Path | None
    ) -> None:
        self._run(
            "INSERT OR REPLACE INTO samplers VALUES (?, ?, ?, ?, ?)",
            (sid, base_model, model_path, str(directory) if directory else None, time.time()),
        )

    def sampler(self, sid: str) -> tuple[str, str | None, Path | None] | None:
        """(base model, model path, weights folder or None for the base) of a sampler."""
        rows = self._run("SELECT base_model, model_path, dir FROM samplers WHERE id = ?", (sid,))
        if not rows:
            return None
        base, path, d = rows[0]
        return base, path, Path(d) if d else None
