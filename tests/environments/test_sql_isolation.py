"""Episodes cannot reach each other through the database (issue 37, items 1-3).

1. The statement check fails closed: text sqlglot cannot read (60 nested parentheses make it
   raise RecursionError) is refused on every driver, and on DuckDB nothing an episode sends
   outlives its query (a temp view named like a table would shadow it for the next episode
   and for its gold query in the pooled worker).
2. PostgreSQL: one deadline bounds the whole graded read; a query that turns its own
   statement_timeout off in its first row and sleeps in a later one is stopped at the limit
   and its backend is gone.
3. PostgreSQL: a query sees no other session's SQL (gold queries run on the same role) and
   cannot cancel or terminate another session.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time

import pytest

from environments import sql_guard
from environments.sql import SQLEnv, run_query
from environments.sql_drivers import DuckDBDriver, PostgresDriver, resolve_target
from environments.sql_guard import QueryError, check_read_only, encode_rows
from tasks.sql.materialise import READER
from tasks.task import Task

NESTED = "(" * 60 + "1 = 1" + ")" * 60
SHADOW = f"CREATE OR REPLACE TEMP VIEW books AS SELECT 42 AS n WHERE {NESTED}"
SHADOW_TABLE = f"CREATE TEMP TABLE authors AS SELECT 42 AS n WHERE {NESTED}"


@pytest.mark.parametrize("dialect", ["sqlite", "duckdb", "postgres"])
@pytest.mark.parametrize(
    "query", [SHADOW, SHADOW_TABLE, f"SELECT 1 WHERE {NESTED}", "SELEC * FROM books", "SELECT 'x"]
)
def test_text_the_check_cannot_read_is_refused(dialect, query):
    with pytest.raises(QueryError) as refused:
        check_read_only(query, dialect)
    message = str(refused.value)
    assert message and "\n" not in message and "Traceback" not in message


def _count_books() -> Task:
    return Task(
        id="count",
        env="sql",
        prompt="How many books are there?",
        answer="SELECT COUNT(*) FROM books",
        metadata={"database": "bookshop"},
    )


def test_an_earlier_episode_cannot_shadow_a_table_for_a_later_gold_query():
    """The attack as a policy sends it: episode 1 plants temp objects named like tables in
    the pooled DuckDB worker; episode 2 answers a constant. Graded against the real gold."""
    sql_guard.close_workers()
    target = resolve_target("bookshop", "duckdb:")
    want = run_query(target, "SELECT COUNT(*) FROM books", 10, 5.0)[1]
    assert want != [(42,)]
    first = SQLEnv(dsn="duckdb:")
    first.reset(options={"task": _count_books()})
    for query in (SHADOW, SHADOW_TABLE):
        obs, *_, info = first.step(f"<sql>{query}</sql>")
        assert info["error"], obs
    first.close()
    second = SQLEnv(dsn="duckdb:")
    second.reset(options={"task": _count_books()})
    *_, info = second.step("<solution>SELECT 42</solution>")
    assert info["correct"] is False
    assert run_query(target, "SELECT COUNT(*) FROM books", 10, 5.0)[1] == want
    assert run_query(target, "SELECT COUNT(*) FROM authors", 10, 5.0)[1] != [(0,)]
    second.close()


def test_duckdb_session_state_ends_with_its_query():
    """Below the statement check: whatever one query leaves in its DuckDB session (temp
    view, temp table, macro, variable, search path) is gone for the next."""
    driver = DuckDBDriver(resolve_target("bookshop", "duckdb:"))

    def sink(columns, rows):
        return encode_rows(columns, rows, 100, 1 << 20)

    def run(sql: str) -> list:
        return json.loads(driver.execute(sql, 5.0, sink))["rows"]

    real = run("SELECT COUNT(*) FROM books")
    for plant in (
        "CREATE OR REPLACE TEMP VIEW books AS SELECT 42 AS n",
        "CREATE TEMP TABLE authors AS SELECT 42 AS n",
        "CREATE TEMP MACRO answer() AS 42",
        "SET VARIABLE answer = 42",
        "SET search_path = temp",
    ):
        with contextlib.suppress(QueryError):  # refused outright is as good
            run(plant)
    assert run("SELECT COUNT(*) FROM books") == real
    assert run("SELECT COUNT(*) FROM authors") != [[42]]
    assert run("SELECT getvariable('answer')") == [[None]]
    with pytest.raises(QueryError):
        run("SELECT answer()")


# ---------------------------------------------------------------------------- PostgreSQL


def _admin_rows(postgres, sql: str) -> list[tuple]:
    import psycopg

    with psycopg.connect(postgres.admin_dsn, autocommit=True) as conn:
        return conn.execute(sql).fetchall()  # type: ignore[arg-type]


ESCAPE = (
    "SELECT CASE WHEN i = 1 THEN set_config('statement_timeout', '0', true) "
    "WHEN i = 65 THEN pg_sleep(600)::text ELSE 'x' END FROM generate_series(1, 70) s(i)"
)


def test_postgres_one_deadline_bounds_the_whole_graded_read(postgres):
    target = resolve_target("bookshop", postgres.reader_dsn)
    start = time.monotonic()
    with pytest.raises(QueryError):
        run_query(target, ESCAPE, 100, 1.0)
    assert time.monotonic() - start < 1.0 + sql_guard.KILL_GRACE_S + 1.5
    deadline = time.monotonic() + 10
    while True:  # the backend is stopped too, not left sleeping
        sleeping = _admin_rows(
            postgres,
            "SELECT pid FROM pg_stat_activity WHERE query LIKE '%pg_sleep(600)%' "
            "AND pid <> pg_backend_pid()",
        )
        if not sleeping or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert not sleeping, "the backend kept running after the time limit"


def test_postgres_the_deadline_spans_every_fetch(postgres):
    """Each FETCH of the server-side cursor stays under statement_timeout (64 rows of 12 ms),
    ten of them do not: the watchdog stops the read at the one deadline, in the driver."""
    driver = PostgresDriver(resolve_target("bookshop", postgres.reader_dsn))
    slow = "SELECT i, pg_sleep(0.012)::text FROM generate_series(1, 640) s(i)"
    start = time.monotonic()
    with pytest.raises(QueryError, match="time limit"):
        driver.execute(slow, 1.0, lambda columns, rows: encode_rows(columns, rows, 1000, 1 << 20))
    assert time.monotonic() - start < 2.0
    assert json.loads(driver.execute("SELECT 1", 5.0, lambda c, r: encode_rows(c, r, 9, 999)))[
        "rows"
    ] == [[1]]  # the connection is usable after


def test_postgres_the_reader_cannot_turn_its_limits_off(postgres):
    target = resolve_target("bookshop", postgres.reader_dsn)
    for query in (
        "SELECT set_config('statement_timeout', '0', true)",
        "SELECT set_config('client_connection_check_interval', '0', false)",
    ):
        with pytest.raises(QueryError):
            run_query(target, query, 10, 5.0)


def test_postgres_a_query_cannot_see_or_signal_another_session(postgres):
    target = resolve_target("bookshop", postgres.reader_dsn)
    victim: dict = {}
    marker = "SELECT 'gold-query-marker', pg_sleep(3)"

    def gold() -> None:
        try:
            victim["rows"] = run_query(target, marker, 10, 10.0)[1]
        except QueryError as e:
            victim["error"] = str(e)

    thread = threading.Thread(target=gold)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not _admin_rows(  # the victim's backend, busy (its text: a FETCH from its cursor)
            postgres,
            f"SELECT 1 FROM pg_stat_activity WHERE usename = '{READER}' AND state = 'active'",
        ):
            assert time.monotonic() < deadline, "the victim query never started"
            time.sleep(0.1)
        seen = ""
        for spy in (
            "SELECT string_agg(coalesce(query, ''), ' ') FROM pg_stat_activity "
            "WHERE pid <> pg_backend_pid()",
            "SELECT string_agg(coalesce(pg_stat_get_backend_activity(b), ''), ' ') "
            "FROM pg_stat_get_backend_idset() b",
        ):
            with contextlib.suppress(QueryError):
                seen += str(run_query(target, spy, 10, 5.0)[1])
        assert "gold-query-marker" not in seen and "skyrl_query" not in seen, seen
        for kill in ("pg_terminate_backend", "pg_cancel_backend"):
            query = (
                f"SELECT {kill}(pid) FROM pg_locks WHERE pid <> pg_backend_pid() "
                f"UNION ALL SELECT {kill}(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid()"
            )
            with contextlib.suppress(QueryError):
                run_query(target, query, 100, 5.0)
    finally:
        thread.join(timeout=30)
    assert victim.get("rows") == [("gold-query-marker", "")], victim
