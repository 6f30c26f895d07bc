"""SQLEnv: grading rule, action grammar, multi-turn flow, Gymnasium API, and a hostile suite."""

from __future__ import annotations

import hashlib
import sqlite3
import time
import warnings
from pathlib import Path

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import environments.registry  # noqa: F401  (registers the skyrl/* ids)
from environments import sql as sql_env
from environments.sql import (
    ActionError,
    QueryError,
    SQLEnv,
    check_read_only,
    execution_match,
    gold_order_matters,
    open_read_only,
    parse_action,
)
from tasks.task import Task

TIME_LIMIT = 0.5
SLACK = 1.0  # two shared cores: leave room for a busy machine


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A small shop database; four tables big enough that their cartesian product never ends."""
    path = tmp_path / "shop.db"
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT, city TEXT);
        CREATE TABLE orders(id INTEGER PRIMARY KEY, customer_id INTEGER, amount REAL);
        CREATE TABLE products(id INTEGER PRIMARY KEY, title TEXT, price REAL);
        CREATE TABLE events(id INTEGER PRIMARY KEY, kind TEXT, note BLOB);
        """
    )
    cities = ["Lisbon", "Oslo", "Lima", "Pune"]
    conn.executemany(
        "INSERT INTO customers VALUES (?, ?, ?)",
        [(i, f"c{i}", cities[i % 4]) for i in range(1, 201)],
    )
    conn.executemany(
        "INSERT INTO orders VALUES (?, ?, ?)",
        [(i, i % 200 + 1, round(i * 1.25, 2)) for i in range(1, 401)],
    )
    conn.executemany(
        "INSERT INTO products VALUES (?, ?, ?)", [(i, f"p{i}", i / 3) for i in range(1, 101)]
    )
    conn.executemany(
        "INSERT INTO events VALUES (?, ?, ?)", [(i, "view", b"\x00\x01") for i in range(1, 301)]
    )
    # text that is not valid UTF-8, as a careless loader would store it
    conn.execute("INSERT INTO events VALUES (1000, CAST(x'fffe41' AS TEXT), NULL)")
    conn.commit()
    conn.close()
    return path


def make_task(db: Path, answer: str, question: str = "How many customers live in Lisbon?") -> Task:
    return Task(id="t1", env="sql", prompt=question, answer=answer, metadata={"database": str(db)})


LISBON = "SELECT COUNT(*) FROM customers WHERE city = 'Lisbon'"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---------------------------------------------------------------------------- grading rule


def test_execution_match_row_order_only_when_gold_orders():
    gold, pred = [(1,), (2,), (3,)], [(3,), (1,), (2,)]
    assert execution_match(gold, pred, order_matters=False)
    assert not execution_match(gold, pred, order_matters=True)
    assert execution_match(gold, list(gold), order_matters=True)


def test_execution_match_rows_are_multisets():
    assert not execution_match([(1,), (1,), (2,)], [(1,), (2,), (2,)], order_matters=False)
    assert not execution_match([(1,), (1,), (2,)], [(1,), (2,)], order_matters=False)
    assert execution_match([(1,), (1,), (2,)], [(2,), (1,), (1,)], order_matters=False)


def test_execution_match_columns_up_to_permutation():
    gold = [(1, "a"), (2, "b")]
    assert execution_match(gold, [("a", 1), ("b", 2)], order_matters=False)
    assert execution_match(gold, [("a", 1), ("b", 2)], order_matters=True)
    # same column contents, but rows paired differently: not the same table
    assert not execution_match(gold, [("b", 1), ("a", 2)], order_matters=False)
    # several columns hold the same values: the search must try more than one order
    assert execution_match([(1, 1, 2), (3, 4, 3)], [(2, 1, 1), (3, 4, 3)], order_matters=False)
    assert not execution_match([(1, 2)], [(1, 2, 3)], order_matters=False)


def test_execution_match_floats_and_nulls():
    # Exact, as both official evaluators compare; rounding is the explicit float_decimals.
    assert not execution_match([(0.3,)], [(0.1 + 0.2,)], order_matters=False)
    assert execution_match([(0.3,)], [(0.1 + 0.2,)], order_matters=False, float_decimals=6)
    assert execution_match([(1,)], [(1.0,)], order_matters=False)
    assert execution_match([(1 / 3,)], [(0.3333333,)], False, float_decimals=6)
    assert not execution_match([(0.33,)], [(0.333,)], False, float_decimals=6)
    assert execution_match([(None, -0.0)], [(None, 0.0)], order_matters=False)
    assert not execution_match([(None,)], [(0,)], order_matters=False)
    assert not execution_match([("1",)], [(1,)], order_matters=False)
    assert execution_match([], [], order_matters=True)
    assert not execution_match([(1,)], [], order_matters=False)


def test_gold_order_matters_when_its_text_says_order_by():
    """Spider's rule (a substring test): an ORDER BY anywhere, subqueries included."""
    assert gold_order_matters("SELECT a FROM t ORDER BY a DESC")
    assert gold_order_matters("SELECT a FROM t UNION SELECT b FROM u ORDER BY 1")
    assert gold_order_matters("SELECT a FROM (SELECT a FROM t ORDER BY a) LIMIT 3")
    assert not gold_order_matters("SELECT a FROM t")


# ---------------------------------------------------------------------------- grammar


def test_parse_action_takes_the_first_tag():
    assert parse_action("think first <sql> SELECT 1 </sql> then <solution>x</solution>") == (
        "sql",
        "SELECT 1",
    )
    assert parse_action("<solution>SELECT 2</solution><sql>SELECT 1</sql>") == (
        "solution",
        "SELECT 2",
    )


@pytest.mark.parametrize(
    "text",
    [
        "SELECT 1",
        "<sql>SELECT 1",  # stopped at max tokens
        "<sql>SELECT 1</solution>",
        "<sql><sql>SELECT 1</sql></sql>",
        "<solution>SELECT <sql>1</sql></solution>",
        "<sql>   </sql>",
        "<SQL>SELECT 1</SQL>",
    ],
)
def test_parse_action_rejects_malformed(text):
    with pytest.raises(ActionError):
        parse_action(text)


@pytest.mark.parametrize(
    "query",
    [
        "DROP TABLE customers",
        "DELETE FROM customers",
        "UPDATE customers SET name = 'x'",
        "INSERT INTO customers VALUES (999, 'x', 'y')",
        "REPLACE INTO customers VALUES (1, 'x', 'y')",
        "CREATE TABLE z(a)",
        "ATTACH DATABASE 'x.db' AS x",
        "PRAGMA user_version = 5",
        "VACUUM INTO 'copy.db'",
        "SELECT 1; DROP TABLE customers",
        "SELECT 1; SELECT 2",
        "BEGIN",
    ],
)
def test_check_read_only_refuses_everything_but_one_select(query):
    with pytest.raises(QueryError):
        check_read_only(query)


def test_check_read_only_accepts_selects():
    for query in [
        "SELECT 1",
        "WITH x AS (SELECT 1 AS a) SELECT a FROM x",
        "SELECT 1 UNION SELECT 2 EXCEPT SELECT 3",
        "SELECT 1;",
        "VALUES (1), (2)",
    ]:
        check_read_only(query)


@pytest.mark.parametrize(
    "query",
    [
        "DROP TABLE customers",
        "PRAGMA user_version = 5",
        "SELECT load_extension('x')",
        "ATTACH DATABASE 'other.db' AS other",
        "VACUUM INTO 'copy.db'",
    ],
)
def test_connection_refuses_writes_without_the_statement_check(db, query, monkeypatch):
    """Levels 1 and 3 alone (the sqlglot check is bypassed) still refuse every write."""
    monkeypatch.chdir(db.parent)
    before = sha256(db)
    conn = open_read_only(db)
    with pytest.raises(sqlite3.DatabaseError, match="authoriz"):  # level 3
        conn.execute(query)
    conn.set_authorizer(None)  # level 1 alone
    with pytest.raises(sqlite3.DatabaseError):
        conn.execute(query)
    conn.close()
    assert sha256(db) == before
    assert sorted(p.name for p in db.parent.iterdir()) == ["shop.db"]


# ---------------------------------------------------------------------------- episodes


def test_first_observation_is_short_and_complete(db):
    env = SQLEnv(database=str(db))
    obs, info = env.reset(options={"task": make_task(db, LISBON)})
    assert "<sql>" in obs and "<solution>" in obs and "e.g. <solution>SELECT" in obs
    assert "customers(" in obs and "orders(" in obs
    assert obs.rstrip().endswith("Turns left: 5")
    assert "How many customers live in Lisbon?" in obs
    assert len(obs) < 700, obs
    assert info == {"turns_left": 5, "error": None, "task_id": "t1"}


def test_explore_then_solve(db):
    env = SQLEnv()
    env.reset(options={"task": make_task(db, LISBON)})
    obs, reward, terminated, truncated, info = env.step(
        "Let me look. <sql>SELECT city, COUNT(*) AS n FROM customers GROUP BY city ORDER BY city</sql>"
    )
    assert obs.splitlines()[:3] == ["city | n", "Lima | 50", "Lisbon | 50"]
    assert "(4 rows)" in obs and obs.endswith("Turns left: 4")
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert info == {"turns_left": 4, "error": None}

    obs, reward, terminated, truncated, info = env.step(
        "<solution>SELECT count(id) FROM customers WHERE city LIKE 'lisbon'</solution>"
    )
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info == {"turns_left": 3, "error": None, "correct": True}
    assert obs == "Correct."


def test_wrong_solution_scores_zero(db):
    env = SQLEnv()
    env.reset(options={"task": make_task(db, LISBON)})
    obs, reward, terminated, truncated, info = env.step(
        "<solution>SELECT COUNT(*) FROM customers</solution>"
    )
    assert (reward, terminated, truncated, info["correct"]) == (0.0, True, False, False)
    assert obs.startswith("Incorrect")
    assert "50" not in obs  # the gold result is not leaked


def test_solution_with_columns_in_another_order_is_correct(db):
    gold = "SELECT name, city FROM customers WHERE id <= 3"
    env = SQLEnv()
    env.reset(options={"task": make_task(db, gold)})
    _, reward, *_ = env.step("<solution>SELECT city, name FROM customers WHERE id < 4</solution>")
    assert reward == 1.0


def test_gold_order_by_makes_row_order_count(db):
    gold = "SELECT id FROM customers WHERE id <= 3 ORDER BY id DESC"
    env = SQLEnv()
    env.reset(options={"task": make_task(db, gold)})
    _, reward, *_ = env.step(
        "<solution>SELECT id FROM customers WHERE id <= 3 ORDER BY id</solution>"
    )
    assert reward == 0.0
    env.reset(options={"task": make_task(db, gold)})
    _, reward, *_ = env.step("<solution>SELECT 4 - id FROM customers WHERE id <= 3</solution>")
    assert reward == 1.0


def test_turn_budget_truncates_with_penalty(db):
    env = SQLEnv(max_turns=3, format_penalty=0.25)
    env.reset(options={"task": make_task(db, LISBON)})
    obs, reward, terminated, truncated, info = env.step("no tags at all")
    assert "Error: no <sql> or <solution> tag found" in obs and obs.endswith("Turns left: 2")
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert info["error"]
    obs, reward, terminated, truncated, _ = env.step("<sql>SELECT 1</sql>")
    assert obs.endswith("Turns left: 1 (use it for <solution>)")
    obs, reward, terminated, truncated, info = env.step("<sql>SELECT 2</sql>")
    assert (reward, terminated, truncated) == (-0.25, False, True)
    assert info == {"turns_left": 0, "error": None, "correct": False}
    assert "Turns left: 0" in obs
    # a step after the end is an observation too, not an exception
    obs, reward, terminated, truncated, info = env.step("<solution>SELECT 1</solution>")
    assert terminated and reward == 0.0 and "reset()" in obs


def test_large_results_are_capped(db):
    env = SQLEnv(max_rows=5)
    env.reset(options={"task": make_task(db, LISBON)})
    obs, *_ = env.step("<sql>SELECT * FROM orders</sql>")
    lines = obs.splitlines()
    assert lines[0] == "id | customer_id | amount"
    assert lines[1:3] == ["1 | 2 | 1.25", "2 | 3 | 2.5"]
    assert lines[6:] == ["... (more than 5 rows; showing 5)", "Turns left: 4"]


def test_long_observations_are_clipped_but_keep_the_reminder(db):
    env = SQLEnv(max_obs_chars=300)
    env.reset(options={"task": make_task(db, LISBON)})
    obs, *_ = env.step("<sql>SELECT * FROM orders</sql>")
    assert len(obs) <= 300 + len("\nTurns left: 4")
    *table, marker, reminder = obs.splitlines()
    assert reminder == "Turns left: 4"
    assert marker == f"... (more than 50 rows; showing {len(table) - 1})" and len(table) > 5
    obs, *_ = env.step(
        "<sql>SELECT group_concat(name || city, ',') AS everything FROM customers</sql>"
    )
    assert len(obs.splitlines()[1]) == 80 and obs.splitlines()[1].endswith("...")


def test_reset_rejects_broken_tasks(db, tmp_path):
    env = SQLEnv()
    with pytest.raises(ValueError, match="gold query fails"):
        env.reset(options={"task": make_task(db, "SELECT nope FROM nowhere")})
    with pytest.raises(ValueError):
        env.reset(options={"task": make_task(tmp_path / "missing.db", LISBON)})
    with pytest.raises(ValueError, match="no database"):
        env.reset(options={"task": Task(id="x", env="sql", prompt="q", answer=LISBON)})


def test_database_from_constructor_when_task_names_none(db):
    env = gym.make("skyrl/SQL-v0", database=str(db))
    task = Task(id="t2", env="sql", prompt="How many orders?", answer="SELECT COUNT(*) FROM orders")
    obs, _ = env.reset(options={"task": task})
    assert "How many orders?" in obs
    _, reward, terminated, *_ = env.step("<solution>SELECT 400</solution>")
    assert (reward, terminated) == (1.0, True)
    env.close()


def test_gymnasium_check_env(db, monkeypatch):
    tasks = [
        make_task(db, LISBON),
        make_task(db, "SELECT name FROM customers WHERE id = 7", "Who is 7?"),
    ]
    monkeypatch.setattr(sql_env.text_env, "train_suite", lambda env: tasks)
    env = gym.make("skyrl/SQL-v0", database=str(db))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env.unwrapped)
    assert not [w for w in caught if "not within the observation space" in str(w.message)]
    obs_a, _ = env.reset(seed=3)
    obs_b, _ = env.reset(seed=3)
    assert obs_a == obs_b
    env.close()


# ---------------------------------------------------------------------------- hostile suite

BIG = "replace(hex(zeroblob(200000)), '0', 'a')"  # 400 kB of 'a', built in one call
HOSTILE_SQL = [
    "DROP TABLE customers",
    "DELETE FROM orders",
    "UPDATE customers SET name = 'pwned'",
    "INSERT INTO customers VALUES (999, 'x', 'y')",
    "ATTACH DATABASE 'evil.db' AS evil",
    "PRAGMA user_version=5",
    "PRAGMA journal_mode=WAL",
    "VACUUM INTO 'copy.db'",
    "SELECT load_extension('x')",
    "SELECT 1; DROP TABLE customers",
    "SELECT 1\x00; DROP TABLE customers",
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c",
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c ORDER BY x",
    "SELECT count(*) FROM customers, orders, products, events",
    "SELECT * FROM customers, orders, products, events ORDER BY random()",
    "SELECT zeroblob(2000000000)",
    # builtins that loop inside one C call, out of the progress handler's reach
    "SELECT printf('%.*c', 2000000000, 'x')",
    "SELECT printf(CAST('%.2000000000c' AS BLOB), 'x')",
    f"SELECT length(ltrim({BIG}, {BIG} || 'b'))",
    f"SELECT length(replace({BIG}, {BIG} || 'b', 'x'))",
    f"SELECT {BIG} LIKE '%' || replace(hex(zeroblob(300)), '0', 'a') || 'b'",
]


@pytest.mark.parametrize("tag", ["sql", "solution"])
def test_hostile_queries_change_nothing_and_end_in_time(db, tag, monkeypatch):
    monkeypatch.chdir(db.parent)
    before = sha256(db)
    env = SQLEnv(time_limit_s=TIME_LIMIT)
    for query in HOSTILE_SQL:
        env.reset(options={"task": make_task(db, LISBON)})
        start = time.monotonic()
        obs, reward, terminated, truncated, info = env.step(f"<{tag}>{query}</{tag}>")
        elapsed = time.monotonic() - start
        assert elapsed < TIME_LIMIT + SLACK, (query, elapsed)
        assert isinstance(obs, str) and info["error"], (query, obs)
        assert reward == 0.0 and terminated == (tag == "solution") and not truncated
    assert sha256(db) == before
    assert sorted(p.name for p in db.parent.iterdir()) == ["shop.db"]
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT COUNT(*), MAX(name) FROM customers").fetchone() == (200, "c99")
    assert conn.execute("PRAGMA user_version").fetchone() == (0,)
    conn.close()


def test_guarded_builtins_keep_their_meaning(db):
    env = SQLEnv()
    env.reset(options={"task": make_task(db, LISBON)})
    obs, _, _, _, info = env.step(
        "<sql>SELECT printf('%5.2f|%03d', price, id) AS p, trim('  a  ') AS t, ltrim('xxa', 'x') AS l,"
        " rtrim(title, '0123456789') AS r, replace(title, 'p', 'q') AS q"
        " FROM products WHERE id = 3</sql>"
    )
    assert info["error"] is None
    assert obs.splitlines()[1] == " 1.00|003 | a | a | p | q3"


def test_cartesian_product_without_aggregate_streams_only_max_rows(db):
    env = SQLEnv(time_limit_s=TIME_LIMIT)
    env.reset(options={"task": make_task(db, LISBON)})
    start = time.monotonic()
    obs, *_ = env.step("<sql>SELECT * FROM customers, orders, products, events</sql>")
    assert time.monotonic() - start < TIME_LIMIT
    assert "... (more than 50 rows; showing " in obs


def test_timeout_message_names_the_limit(db):
    env = SQLEnv(time_limit_s=TIME_LIMIT)
    env.reset(options={"task": make_task(db, LISBON)})
    obs, _, _, _, info = env.step(
        "<sql>SELECT count(*) FROM customers, orders, products, events</sql>"
    )
    assert info["error"] == "the query was stopped at the 0.5 s time limit"
    assert obs.startswith("Error: the query was stopped")


@pytest.mark.parametrize(
    "action",
    [
        "<sql>SELECT '\ud800' AS s</sql>",  # a lone surrogate
        b"<sql>SELECT 'caf\xff\xfe' AS s</sql>",  # not UTF-8
        "\udcff\udcfe<sql>SELECT 1</sql>",
        "<sql>SELECT 1</sql>" + "x" * 1_000_000,
        "<sql>" + "SELECT 1 " * 10_000 + "</sql>",  # 90 kB of nonsense SQL
        "<sql>SELECT 1",
        "<sql><solution>SELECT 1</solution></sql>",
        "<solution></solution>",
        "(" * 50_000,
        "<sql>" + "(" * 5_000 + "1" + ")" * 5_000 + "</sql>",
        "<sql>SELECT kind FROM events WHERE id = 1000</sql>",  # invalid UTF-8 stored in the DB
        "<sql>SELECT note FROM events LIMIT 1</sql>",
        "",
        None,
        12345,
    ],
)
def test_garbage_actions_are_observations(db, action):
    env = SQLEnv(time_limit_s=TIME_LIMIT)
    env.reset(options={"task": make_task(db, LISBON)})
    start = time.monotonic()
    obs, reward, terminated, truncated, info = env.step(action)
    assert time.monotonic() - start < TIME_LIMIT + SLACK
    assert isinstance(obs, str) and obs.endswith("Turns left: 4")
    obs.encode("utf-8")  # no lone surrogates leak into what gets logged and tokenized
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert set(info) == {"turns_left", "error"}


def test_invalid_utf8_in_the_database_is_replaced(db):
    env = SQLEnv()
    env.reset(options={"task": make_task(db, LISBON)})
    obs, *_ = env.step("<sql>SELECT kind FROM events WHERE id = 1000</sql>")
    assert obs.splitlines()[1] == "\ufffd\ufffdA"


# ---------------------------------------------------------------------------- bundled suite


def test_bundled_suite_gold_answers_score_one():
    tasks_sql = pytest.importorskip("tasks.sql")
    suite = tasks_sql.load_suite("train")
    env = gym.make("skyrl/SQL-v0")
    check_env(env.unwrapped)
    for task in suite[:: max(1, len(suite) // 25)]:
        obs, _ = env.reset(options={"task": task})
        assert task.prompt in obs
        _, reward, terminated, _, info = env.step(f"<solution>{task.answer}</solution>")
        assert (reward, terminated, info["correct"]) == (1.0, True, True), task.id
    env.close()


def test_query_components_by_hand():
    # aliases resolve away; COUNT(*) is its function alone; literals, clauses and comparisons
    parts = sql_env.query_components(
        "SELECT COUNT(*) FROM books b JOIN authors a ON b.author_id = a.id "
        "WHERE a.name = 'Hugo Dubois'"
    )
    assert parts == {
        "function:count": 1,
        "table:books": 1,
        "table:authors": 1,
        "clause:join": 1,
        "clause:where": 1,
        "column:author_id": 1,
        "column:id": 1,
        "column:name": 1,
        "compare:eq": 2,
        "value:hugo dubois": 1,
    }
    assert sql_env.query_components("SELECT b.title FROM books AS b") == (
        sql_env.query_components("SELECT title FROM books")
    )
    assert sql_env.query_components("this is not sql (((") == {}


def test_component_f1_by_hand():
    gold = "SELECT COUNT(*) FROM books WHERE price > 7.95"
    # gold parts: count, books, where, price, gt, 7.95 (6)
    f1 = sql_env.component_f1
    assert f1(gold, gold) == 1.0
    # the prompt-copying answer shares only `count`: P 1/2, R 1/6 -> F1 0.25
    assert f1(gold, "SELECT COUNT(*) FROM authors") == pytest.approx(0.25)
    # the right table too: P 2/2, R 2/6 -> 0.5
    assert f1(gold, "SELECT COUNT(*) FROM books") == pytest.approx(0.5)
    # `SELECT *` of the right table shares only the table: P 1/2, R 1/6 -> 0.25
    assert f1(gold, "SELECT * FROM books") == pytest.approx(0.25)
    assert f1(gold, "SELECT 1") == 0.0


def test_partial_credit_is_component_shaping_for_wrong_answers_only(db):
    task = make_task(db, "SELECT name FROM customers WHERE city = 'Lisbon'", "Who lives in Lisbon?")
    env = SQLEnv(database=str(db), partial_credit=0.5)

    def reward(query: str) -> float:
        env.reset(options={"task": task})
        return env.step(f"<solution>{query}</solution>")[1]

    # gold parts: customers, name, city, where, eq, lisbon (6); this one has 2 of them
    assert reward("SELECT name FROM customers") == pytest.approx(
        0.5 * 2 * 1 * (2 / 6) / (1 + 2 / 6)
    )
    assert reward("SELECT 1") == 0.0
    assert reward("SELECT nope FROM nowhere") == 0.0  # fails to run: no credit
    # one query for every question earns little: only the table is shared here
    assert reward("SELECT * FROM customers") == pytest.approx(
        0.5 * 2 * (1 / 2) * (1 / 6) / (1 / 2 + 1 / 6)
    )
    # closer to the gold earns more, and only the gold's result earns 1
    assert reward("SELECT name FROM customers WHERE city = 'Oslo'") > reward(
        "SELECT name FROM customers"
    )
    assert reward(task.answer) == 1.0
    plain = SQLEnv(database=str(db))  # the default is pure execution match
    plain.reset(options={"task": task})
    assert plain.step("<solution>SELECT name FROM customers</solution>")[1] == 0.0


def test_demonstration_is_the_gold_query_after_the_prefix(db):
    task = make_task(db, "SELECT COUNT(*) FROM customers", "How many customers?")
    assert SQLEnv().demonstration(task) == "<solution>SELECT COUNT(*) FROM customers</solution>"
    prefixed = SQLEnv(response_prefix="<solution>")
    assert prefixed.demonstration(task) == "SELECT COUNT(*) FROM customers</solution>"
    # the demonstration, sent as the action, is graded correct
    prefixed = SQLEnv(database=str(db), response_prefix="<solution>")
    prefixed.reset(options={"task": task})
    assert prefixed.step("<solution>" + prefixed.demonstration(task))[1] == 1.0
    assert SQLEnv(response_prefix="<sql>").demonstration(task) is None
