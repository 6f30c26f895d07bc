"""The schema-linking reward term (`schema_link_weight`, Reasoning-SQL's lever): the
Jaccard overlap of the tables and columns an answer names with the gold query's, added to
execution match; off (0) by default, so the reward is unchanged unless asked for."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from environments import registry
from environments.sql import SQLEnv, schema_link
from tasks.task import Task

GOLD = "SELECT name FROM customers WHERE city = 'Lisbon'"


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "shop.db"
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT, city TEXT);
        CREATE TABLE orders(id INTEGER PRIMARY KEY, customer_id INTEGER, amount REAL);
        INSERT INTO customers VALUES (1, 'Ana', 'Lisbon'), (2, 'Ole', 'Oslo');
        INSERT INTO orders VALUES (1, 1, 9.5);
        """
    )
    conn.commit()
    conn.close()
    return path


def _reward(env: SQLEnv, db: Path, query: str) -> float:
    task = Task(id="t1", env="sql", prompt="Who lives in Lisbon?", answer=GOLD,
                metadata={"database": str(db)})  # fmt: skip
    env.reset(options={"task": task})
    return env.step(f"<solution>{query}</solution>")[1]


def test_the_link_score_is_the_jaccard_overlap_of_tables_and_columns():
    # gold items: customers, name, city
    assert schema_link(GOLD, GOLD) == 1.0
    assert schema_link(GOLD, "SELECT c.name FROM customers AS c") == pytest.approx(2 / 3)
    # an extra column widens the union: {customers, name, city, id}, 3 shared
    assert schema_link(GOLD, "SELECT id, name FROM customers WHERE city = 'x'") == 0.75
    assert schema_link(GOLD, "SELECT amount FROM orders") == 0.0
    assert schema_link(GOLD, "SELECT * FROM customers") == pytest.approx(1 / 3)  # * names none
    assert schema_link(GOLD, "not sql at all (") == 0.0


def test_the_term_adds_weight_times_link_to_execution_match(db):
    linked = SQLEnv(database=str(db), schema_link_weight=0.5)
    assert _reward(linked, db, GOLD) == pytest.approx(1.5)
    assert _reward(linked, db, "SELECT name FROM customers") == pytest.approx(0.5 * 2 / 3)
    # a query that names a missing column still says which tables it read
    assert _reward(linked, db, "SELECT nme FROM customers") == pytest.approx(0.5 * 1 / 4)
    assert _reward(linked, db, "SELECT amount FROM orders") == 0.0
    shaped = SQLEnv(database=str(db), schema_link_weight=0.5, partial_credit=0.3)
    plain_shaped = SQLEnv(database=str(db), partial_credit=0.3)
    query = "SELECT name FROM customers"
    assert _reward(shaped, db, query) == pytest.approx(
        _reward(plain_shaped, db, query) + 0.5 * 2 / 3
    )


def test_the_default_leaves_the_reward_as_it_was(db):
    plain = SQLEnv(database=str(db))
    assert plain.schema_link_weight == 0.0
    assert _reward(plain, db, GOLD) == 1.0
    assert _reward(plain, db, "SELECT name FROM customers") == 0.0


def test_a_bad_weight_is_refused_in_one_sentence():
    row = registry.resolve("sql", {})
    with pytest.raises(ValueError, match="schema_link_weight must be between 0 and 1"):
        row.build(2, {"schema_link_weight": 3})
    with pytest.raises(ValueError, match="schema_link_weight must be between 0 and 1"):
        SQLEnv(schema_link_weight=-0.1)
