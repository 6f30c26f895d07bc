"""Hostile SQL that the statement check, the authorizer and the progress handler cannot stop:
work inside one C call, and results that are few rows but many bytes (issue 11, item 9).

Every query here is something a policy can write in `<sql>` or `<solution>`, or a task file
can hold as its gold answer. The time bound and the memory bounds are measured, not assumed.
Each test runs on every driver (issue 15): SQLite, DuckDB and PostgreSQL, with each
DBMS's own version of the attack.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from environments.sql import SQLEnv
from tasks.task import Task

TIME_LIMIT = 0.5
SLACK = 1.0  # two shared cores: leave room for a busy machine
ROOT = Path(__file__).resolve().parents[2]

# One call of instr() compares a 400 kB needle at each of 600 000 offsets: seconds of CPU in a
# single C function, where neither the progress handler nor sqlite3_interrupt() reaches.
INSTR = "instr(zeroblob(999000), zeroblob(400000) || x'01')"
ONE_CALL_BOMBS = [
    f"SELECT {INSTR}",
    f"SELECT count(*) FROM (SELECT 1 UNION ALL SELECT 2) WHERE {INSTR} > 0",
    f"SELECT {INSTR} AS a, {INSTR} AS b",
]


# The same attacks on the other drivers: work the DBMS does not stop by itself, huge rows.
BOMBS = {
    "sqlite": ONE_CALL_BOMBS,
    "duckdb": [
        "SELECT count(*) FROM range(100000000000)",
        "SELECT max(length(repeat('x', 1000) || i)) FROM range(10000000000) t(i)",
        "SELECT count(*) FROM range(100000) a, range(100000) b",
    ],
    "postgresql": [
        "SELECT pg_sleep(30)",
        "SELECT count(*) FROM t a, t b, t c, t d, t e, t f, t g, t h, t i, t j, t k, t l, t m, t n, t o, t p, t q, t r, t s, t u, t v",
        "SELECT count(*) FROM (SELECT pg_sleep(0.01) FROM t a, t b, t c, t d, t e, t f) s",
    ],
}
ROWS_OF = {
    "sqlite": "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c LIMIT {n}) SELECT i, {value} FROM c",
    "duckdb": "SELECT i, {value} FROM range(1, {n} + 1) c(i)",
    "postgresql": "SELECT i, {value} FROM generate_series(1, {n}) c(i)",
}
MB_TEXT = {
    "sqlite": "hex(zeroblob(499000))",
    "duckdb": "repeat('ab', 499000)",
    "postgresql": "repeat('ab', 499000)",
}
MB_BLOB = {
    "sqlite": "zeroblob(999000)",
    "duckdb": "repeat('x', 999000)::BLOB",
    "postgresql": "convert_to(repeat('x', 999000), 'UTF8')",
}
SORT_KEY = {
    "sqlite": "zeroblob(999000) || i AS b",
    "duckdb": "repeat('x', 999000) || i AS b",
    "postgresql": "repeat('x', 999000) || i AS b",
}


@pytest.fixture(params=["sqlite", "duckdb", "postgresql"])
def driver(request) -> str:
    return request.param


@pytest.fixture
def db(tmp_path: Path, driver: str, request) -> str:
    """A table t(x) = 1, 2, 3 on the driver, named as a task's `metadata.database`."""
    path = tmp_path / "tiny.db"
    conn = sqlite3.connect(path)
    conn.executescript("CREATE TABLE t(x INTEGER); INSERT INTO t VALUES (1), (2), (3);")
    conn.commit()
    conn.close()
    if driver == "sqlite":
        return str(path)
    if driver == "duckdb":
        from tasks.sql.materialise import to_duckdb

        to_duckdb(path, tmp_path / "tiny.duckdb")
        return f"duckdb:{tmp_path / 'tiny.duckdb'}"
    import psycopg

    from tasks.sql.materialise import to_postgres

    cluster = request.getfixturevalue("postgres")
    # a schema named after the reader: its default search_path ("$user", public) finds t
    with psycopg.connect(cluster.admin_dsn) as conn:
        to_postgres(path, conn, "skyrl_reader")
        conn.execute("GRANT USAGE ON SCHEMA skyrl_reader TO skyrl_reader")
        conn.execute("GRANT SELECT ON ALL TABLES IN SCHEMA skyrl_reader TO skyrl_reader")
    return cluster.reader_dsn


def task(db: str, answer: str = "SELECT count(*) FROM t") -> Task:
    return Task(id="q", env="sql", prompt="How many?", answer=answer, metadata={"database": db})


@pytest.mark.parametrize("tag", ["sql", "solution"])
@pytest.mark.parametrize("bomb", range(3))
def test_work_inside_one_c_call_stops_at_the_time_limit(db, driver, tag, bomb):
    query = BOMBS[driver][bomb]
    env = SQLEnv(time_limit_s=TIME_LIMIT)
    env.reset(options={"task": task(db)})
    start = time.monotonic()
    obs, reward, terminated, _, info = env.step(f"<{tag}>{query}</{tag}>")
    elapsed = time.monotonic() - start
    assert elapsed < TIME_LIMIT + SLACK, elapsed
    assert info["error"] == f"the query was stopped at the {TIME_LIMIT:g} s time limit"
    assert reward == 0.0 and terminated == (tag == "solution")
    # The environment still works after a stopped query.
    env.reset(options={"task": task(db)})
    _, reward, *_ = env.step("<solution>SELECT count(*) FROM t</solution>")
    assert reward == 1.0
    env.close()


def test_a_gold_query_inside_one_c_call_stops_at_its_limit(db, driver):
    """The gold query (a task file's field) gets GOLD_TIME_FACTOR x the limit, and no more."""
    limit = 0.1
    env = SQLEnv(time_limit_s=limit)
    env.reset(options={"task": task(db)})  # a query worker is started (not what is timed)
    start = time.monotonic()
    with pytest.raises(ValueError, match="the gold query fails .* time limit"):
        env.reset(options={"task": task(db, BOMBS[driver][0])})
    assert time.monotonic() - start < 10 * limit + SLACK
    env.close()


# Each row is 1 MB; a few hundred of them fit the row limit (100 000 for a <solution>).
MEMORY_PROBE = """
import json, resource, sys
from environments.sql import SQLEnv
from environments import sql_guard
from tasks.task import Task

db, actions = sys.argv[1], json.loads(sys.argv[2])
task = Task(id="q", env="sql", prompt="?", answer="SELECT 1 AS one", metadata={"database": db})
env = SQLEnv(time_limit_s=10.0)
env.reset(options={"task": task})
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
errors = []
for action in actions:
    env.reset(options={"task": task})
    errors.append(env.step(action)[4]["error"])
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
env.close()
getattr(sql_guard, "close_workers", lambda: None)()
children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({"host_kb": after - before, "children_kb": children, "errors": errors}))
"""


def test_results_of_few_large_rows_are_capped_by_bytes(db, driver):
    """600 rows of 1 MB: far below the row limit, 600 MB if fetched. The host process must not
    grow by more than a small multiple of the byte cap, and neither may the query process."""
    rows = ROWS_OF[driver]
    actions = [
        "<solution>" + rows.format(n=600, value=MB_TEXT[driver]) + "</solution>",
        "<solution>" + rows.format(n=600, value=MB_BLOB[driver]) + "</solution>",
        "<sql>" + rows.format(n=49, value=MB_TEXT[driver]) + "</sql>",
    ]
    out = subprocess.run(
        [sys.executable, "-c", MEMORY_PROBE, db, json.dumps(actions)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["host_kb"] < 150_000, report
    assert report["children_kb"] < 400_000, report
    # DuckDB builds a result before handing out its first row: its memory limit stops it.
    stopped_by = ("bytes", "memory") if driver == "duckdb" else ("bytes",)
    assert all(e and any(w in e for w in stopped_by) for e in report["errors"]), report


def test_a_large_result_that_fits_is_still_graded(db, driver):
    """The byte cap is not a row cap: 20 000 small rows grade as before."""
    gold = ROWS_OF[driver].format(n=20_000, value="'row ' || i")
    env = SQLEnv(time_limit_s=5.0)
    env.reset(options={"task": task(db, gold)})
    _, reward, _, _, info = env.step(f"<solution>{gold}</solution>")
    assert (reward, info["error"]) == (1.0, None)
    env.close()


def test_sorting_a_huge_result_ends_in_time(db, driver):
    """An ORDER BY over 1 GB of values (sorted in memory, under the worker's heap limit)."""
    env = SQLEnv(time_limit_s=TIME_LIMIT)
    env.reset(options={"task": task(db)})
    query = ROWS_OF[driver].format(n=1000, value=SORT_KEY[driver]) + " ORDER BY b"
    start = time.monotonic()
    _, _, _, _, info = env.step(f"<sql>{query}</sql>")
    assert time.monotonic() - start < TIME_LIMIT + SLACK
    assert info["error"], info
    env.close()
