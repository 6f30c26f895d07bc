"""SQL on three drivers (issue 15): the bundled suite agrees on SQLite, DuckDB and PostgreSQL,
each grading rule holds on each driver, and each driver stays read-only.

PostgreSQL is a real throwaway cluster (`postgres` fixture in conftest.py); DuckDB real files.
"""

from __future__ import annotations

import time

import pytest

from environments.sql import SQLEnv, gold_sql, run_query
from environments.sql_drivers import Target, resolve_target
from environments.sql_grade import execution_match, gold_order_matters
from tasks.sql import load_suite
from tasks.task import Task

DRIVERS = ["sqlite", "duckdb", "postgresql"]


@pytest.fixture(params=DRIVERS)
def dsn(request) -> str | None:
    if request.param == "postgresql":
        return request.getfixturevalue("postgres").reader_dsn
    return {"sqlite": None, "duckdb": "duckdb:"}[request.param]


def test_every_gold_agrees_on_the_three_drivers(postgres):
    """Every bundled gold query, translated by sqlglot, returns the same rows on DuckDB and
    PostgreSQL as on SQLite (floats to 6 decimals: AVG is NUMERIC on PostgreSQL)."""
    suite = load_suite()
    assert len(suite) > 400
    bad = []
    for task in suite:
        name = task.metadata["database"]
        want = None
        for target in (
            resolve_target(name),
            resolve_target(name, "duckdb:"),
            resolve_target(name, postgres.reader_dsn),
        ):
            _, rows, more = run_query(target, gold_sql(task, target), 100_000, 20.0)
            assert not more
            if want is None:
                want = rows
            elif not execution_match(
                want, rows, gold_order_matters(task.answer), float_decimals=6
            ) or len(rows) != len(want):
                bad.append((task.id, target.kind, task.answer))
    assert not bad, bad[:5]


def test_every_split_exercises_the_grading_rules():
    """NULL cells, duplicate rows, ORDER BY without LIMIT and float results, in each split."""
    for split in ("train", "dev", "test"):
        seen = {"null": 0, "duplicates": 0, "order_no_limit": 0, "float": 0}
        for task in load_suite(split):
            _, rows, _ = run_query(resolve_target(task.metadata["database"]), task.answer, 100, 5.0)
            seen["null"] += any(v is None for r in rows for v in r)
            seen["duplicates"] += len(set(rows)) < len(rows)
            seen["order_no_limit"] += "ORDER BY" in task.answer and "LIMIT" not in task.answer
            seen["float"] += any(isinstance(v, float) and v != int(v) for r in rows for v in r)
        assert all(seen.values()), (split, seen)


# (gold, prediction, spider, bird); every query runs on all three drivers.
THREE = "SELECT 2 AS x UNION ALL SELECT 1 UNION ALL SELECT 3"
D = "CAST({} AS DOUBLE PRECISION)"
RULES = {
    "null": ("SELECT NULL AS a", "SELECT NULL", True, True),
    "null is not zero": ("SELECT NULL AS a", "SELECT 0", False, False),
    "null duplicates": ("SELECT NULL AS a UNION ALL SELECT NULL", "SELECT NULL", False, True),
    "duplicates count": (
        "SELECT 1 AS a UNION ALL SELECT 1 UNION ALL SELECT 2",
        "SELECT 1 UNION ALL SELECT 2",
        False,
        True,
    ),
    "duplicates in any order": (
        "SELECT 1 AS a UNION ALL SELECT 1 UNION ALL SELECT 2",
        "SELECT 2 UNION ALL SELECT 1 UNION ALL SELECT 1",
        True,
        True,
    ),
    "order by without limit: order counts": (
        f"{THREE} ORDER BY x",
        f"{THREE} ORDER BY x DESC",
        False,
        True,
    ),
    "order by without limit: same order": (
        f"{THREE} ORDER BY x",
        "SELECT 1 AS y UNION ALL SELECT 2 UNION ALL SELECT 3 ORDER BY y",
        True,
        True,
    ),
    "no order by: any order": (THREE, f"{THREE} ORDER BY x DESC", True, True),
    "column permutation": ("SELECT 1 AS a, 'x' AS b", "SELECT 'x', 1", True, False),
    "rows paired differently": (
        "SELECT 1 AS a, 'x' AS b UNION ALL SELECT 2, 'y'",
        "SELECT 1, 'y' UNION ALL SELECT 2, 'x'",
        False,
        False,
    ),
    "floats exactly": (
        f"SELECT {D.format('0.1')} + {D.format('0.2')} AS f",
        f"SELECT {D.format('0.3')}",
        False,
        False,
    ),
    "int equals float": ("SELECT 2 AS a", f"SELECT {D.format('2')}", True, True),
}


@pytest.mark.parametrize("rule", list(RULES))
def test_grading_rules_on_every_driver(dsn, rule):
    gold, pred, spider, bird = RULES[rule]
    task = Task(id=rule, env="sql", prompt="?", answer=gold, metadata={"database": "bookshop"})
    for grader, want in (("spider", spider), ("bird", bird)):
        env = SQLEnv(dsn=dsn, grader=grader)
        env.reset(options={"task": task})
        _, reward, done, _, info = env.step(f"<solution>{pred}</solution>")
        assert (info["correct"], info["error"]) == (want, None), (grader, rule, info)
        env.close()


def test_float_tolerance_and_distinct_are_explicit_options(dsn):
    floats = Task(
        id="f",
        env="sql",
        prompt="?",
        answer=f"SELECT {D.format('0.1')} + {D.format('0.2')}",
        metadata={"database": "bookshop"},
    )
    env = SQLEnv(dsn=dsn, float_decimals=6)
    env.reset(options={"task": floats})
    assert env.step(f"<solution>SELECT {D.format('0.3')}</solution>")[4]["correct"]
    twice = "(SELECT 1 AS x UNION ALL SELECT 1) AS s"
    distinct = Task(
        id="d",
        env="sql",
        prompt="?",
        answer=f"SELECT DISTINCT x FROM {twice}",
        metadata={"database": "bookshop"},
    )
    for keep, want in ((True, False), (False, True)):
        env = SQLEnv(dsn=dsn, keep_distinct=keep)
        env.reset(options={"task": distinct})
        assert env.step(f"<solution>SELECT x FROM {twice}</solution>")[4]["correct"] is want
    # BIRD keeps DISTINCT as written (its sets ignore duplicates anyway)
    env = SQLEnv(dsn=dsn, grader="bird", keep_distinct=False)
    env.reset(options={"task": distinct})
    assert env.step(f"<solution>SELECT x FROM {twice}</solution>")[4]["correct"]


def test_prompts_name_the_driver_and_show_the_same_schema(postgres):
    task = load_suite("dev")[0]
    prompts = {}
    for dsn in (None, "duckdb:", postgres.reader_dsn):
        env = SQLEnv(dsn=dsn)
        prompts[dsn] = env.reset(options={"task": task})[0]
    texts = list(prompts.values())
    assert "one SQLite query" in texts[0] and "one DuckDB query" in texts[1]
    assert "one PostgreSQL query" in texts[2]
    assert len({t.split("Question:")[0] for t in texts}) == 1  # the same tables


WRITES = {
    "duckdb": [
        "CREATE TABLE x(a INT)",
        "INSERT INTO authors VALUES (1, 'a', 'b', 1)",
        "ATTACH '/tmp/skyrl-attack.duckdb' AS a",
        "SELECT * FROM read_csv('/etc/passwd')",
        "COPY authors TO '/tmp/skyrl-attack.csv'",
        "SET enable_external_access = true",
        "INSTALL httpfs",
        "SELECT * FROM authors; DROP TABLE authors",
    ],
    "postgresql": [
        "CREATE TABLE x(a INT)",
        "INSERT INTO authors VALUES (1, 'a', 'b', 1)",
        "SELECT pg_read_file('/etc/passwd')",
        "COPY authors TO '/tmp/skyrl-attack.csv'",
        "SELECT nextval('x')",
        "SELECT lo_import('/etc/passwd')",
        "SELECT * FROM authors; DROP TABLE authors",
    ],
}


@pytest.mark.parametrize("driver", ["duckdb", "postgresql"])
def test_writes_and_outside_access_are_refused(driver, request):
    dsn = "duckdb:" if driver == "duckdb" else request.getfixturevalue("postgres").reader_dsn
    target = resolve_target("bookshop", dsn)
    before = run_query(target, "SELECT COUNT(*) FROM authors", 10, 5.0)[1]
    for query in WRITES[driver]:
        env = SQLEnv(dsn=dsn)
        env.reset(options={"task": load_suite("train")[0]})
        obs, reward, *_, info = env.step(f"<sql>{query}</sql>")
        assert info["error"], (query, obs)
    # set_config is not the reader's (issue 37.2), and the next query is read-only
    if driver == "postgresql":
        query = "SELECT set_config('default_transaction_read_only', 'off', false)"
        with pytest.raises(ValueError, match="read-only"):
            run_query(target, query, 10, 5.0)
        state = run_query(target, "SELECT current_setting('default_transaction_read_only')", 1, 5)
        assert state[1] == [("on",)]
    assert run_query(target, "SELECT COUNT(*) FROM authors", 10, 5.0)[1] == before


def test_a_superuser_dsn_is_refused(postgres):
    target = Target("postgresql", postgres.admin_dsn, schema="bookshop")
    with pytest.raises(ValueError, match="superuser"):
        run_query(target, "SELECT 1", 1, 5.0)


def test_a_missing_schema_says_how_to_build_it(postgres):
    target = Target("postgresql", postgres.reader_dsn, schema="nowhere")
    with pytest.raises(ValueError, match="python -m tasks.sql.materialise"):
        run_query(target, "SELECT 1", 1, 5.0)


def test_bad_dsn_is_one_sentence():
    with pytest.raises(ValueError, match="accepted: sqlite:, duckdb"):
        SQLEnv(dsn="mysql://x")
    env = SQLEnv(dsn="duckdb:")
    task = Task(id="q", env="sql", prompt="?", answer="SELECT 1", metadata={"database": "/x.db"})
    with pytest.raises(ValueError, match="not a bundled one"):
        env.reset(options={"task": task})


def test_postgres_time_limit_is_enforced_by_the_server(postgres):
    target = resolve_target("bookshop", postgres.reader_dsn)
    start = time.monotonic()
    with pytest.raises(ValueError, match="time limit"):
        run_query(target, "SELECT pg_sleep(30)", 1, 0.5)
    assert time.monotonic() - start < 2.5
