"""Idle query workers are bounded over all databases, not only per database: a run (or a
test session) that touches many databases must not keep hundreds of worker processes."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from environments import sql_guard


def _db(path: Path) -> Path:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (x INTEGER)")
    conn.execute("INSERT INTO t VALUES (1)")
    conn.commit()
    conn.close()
    return path


def test_idle_workers_are_capped_across_databases(tmp_path: Path) -> None:
    sql_guard.close_workers()
    n = sql_guard.MAX_IDLE_TOTAL + 4
    procs = []
    for i in range(n):
        cols, rows, _ = sql_guard.run_query(
            _db(tmp_path / f"db{i}.sqlite"), "SELECT x FROM t", 10, 5.0
        )
        assert rows == [(1,)]
        procs.extend(w.proc for idle in sql_guard._IDLE.values() for w in idle)
    idle = [w for ws in sql_guard._IDLE.values() for w in ws]
    assert len(idle) == sql_guard.MAX_IDLE_TOTAL
    alive = {p.pid for p in procs if p.poll() is None}
    assert alive == {w.proc.pid for w in idle}  # the evicted ones are really gone
    # the most recently used databases keep theirs; the first ones were evicted
    kept = {Path(t.location).name for t, ws in sql_guard._IDLE.items() if ws}
    assert f"db{n - 1}.sqlite" in kept and "db0.sqlite" not in kept
    sql_guard.close_workers()
