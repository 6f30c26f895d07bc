"""Spider- and BIRD-format folders as `--tasks` (issue 15): small fixtures laid out exactly as
the official downloads (file names, JSON fields, database/<db_id>/<db_id>.sqlite), built here."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from environments.sql import SQLEnv
from tasks.task import load_tasks

SCHEMA = """
CREATE TABLE singer (Singer_ID int, Name text, Country text, Age int, PRIMARY KEY (Singer_ID));
CREATE TABLE concert (concert_ID int, concert_Name text, Stadium_ID int, Year text);
INSERT INTO singer VALUES (1, 'Joe Sharp', 'Netherlands', 52), (2, 'Timbaland', 'United States', 32),
  (3, 'Justin Brown', 'France', 29), (4, 'Rose White', 'France', 41), (5, 'John Nizinik', NULL, 43);
INSERT INTO concert VALUES (1, 'Auditions', 1, '2014'), (2, 'Super bootcamp', 2, '2014'),
  (3, 'Home Visits', 2, '2015');
"""


def _database(path: Path) -> None:
    path.parent.mkdir(parents=True)
    conn = sqlite3.connect(path)
    conn.executescript(SCHEMA)
    conn.commit()
    conn.close()


@pytest.fixture
def spider(tmp_path: Path) -> Path:
    """spider_data/ as the official zip unpacks (only the parts a loader reads)."""
    root = tmp_path / "spider_data"
    _database(root / "database" / "concert_singer" / "concert_singer.sqlite")
    (root / "tables.json").write_text(json.dumps([{"db_id": "concert_singer"}]))
    q = lambda question, query: {  # noqa: E731
        "db_id": "concert_singer",
        "query": query,
        "query_toks": query.split(),
        "question": question,
        "question_toks": question.split(),
        "sql": {},
    }
    (root / "train_spider.json").write_text(
        json.dumps([q("How many singers do we have?", "SELECT count(*) FROM singer")])
    )
    (root / "train_others.json").write_text("[]")
    (root / "dev.json").write_text(
        json.dumps(
            [
                q("What are the countries of all singers?", "SELECT Country FROM singer"),
                q(
                    "Show name and age of singers ordered by age descending.",
                    "SELECT Name, Age FROM singer ORDER BY Age DESC",
                ),
            ]
        )
    )
    return root


@pytest.fixture
def bird(tmp_path: Path) -> Path:
    """BIRD's dev folder as released (dev.json, dev_databases/<db_id>/<db_id>.sqlite)."""
    root = tmp_path / "dev_20240627"
    _database(root / "dev_databases" / "concert_singer" / "concert_singer.sqlite")
    (root / "dev_databases" / "concert_singer" / "database_description").mkdir()
    (root / "dev.json").write_text(
        json.dumps(
            [
                {
                    "question_id": 0,
                    "db_id": "concert_singer",
                    "question": "Which countries do singers older than 40 come from?",
                    "evidence": "older than 40 refers to Age > 40",
                    "SQL": "SELECT Country FROM singer WHERE Age > 40",
                    "difficulty": "simple",
                }
            ]
        )
    )
    return root


def test_a_spider_folder_loads_with_its_splits_and_grades_by_spider(spider):
    tasks = load_tasks(spider)
    assert [(t.id, t.split) for t in tasks] == [
        ("spider-train_spider-0", "train"),
        ("spider-dev-0", "dev"),
        ("spider-dev-1", "dev"),
    ]
    database = spider / "database" / "concert_singer" / "concert_singer.sqlite"
    assert tasks[1].metadata["database"] == str(database.resolve())
    env = SQLEnv()
    obs, _ = env.reset(options={"task": tasks[1]})
    # CREATE TABLE statements and 3 example rows per table, as the Spider recipes show them
    assert "CREATE TABLE singer (Singer_ID int" in obs and "3 example rows from singer" in obs
    assert "Joe Sharp" in obs and "Justin Brown" in obs and "Rose White" not in obs
    assert "What are the countries of all singers?" in obs
    # duplicates (France twice) and a NULL: Spider's multiset rule
    _, reward, *_ = env.step("<solution>SELECT DISTINCT Country FROM singer</solution>")
    assert reward == 0.0
    env.reset(options={"task": tasks[1]})
    assert env.step("<solution>SELECT Country FROM singer</solution>")[1] == 1.0
    # ORDER BY without LIMIT: order counts; columns may be permuted
    env.reset(options={"task": tasks[2]})
    assert env.step("<solution>SELECT Age, Name FROM singer ORDER BY Age DESC</solution>")[1] == 1.0
    env.reset(options={"task": tasks[2]})
    assert env.step("<solution>SELECT Name, Age FROM singer ORDER BY Age</solution>")[1] == 0.0


def test_a_bird_folder_loads_with_evidence_and_grades_by_bird(bird):
    (task,) = load_tasks(bird)
    assert (task.id, task.split, task.metadata["grader"]) == ("bird-dev-0", "dev", "bird")
    assert task.metadata["difficulty"] == "simple"
    env = SQLEnv()
    obs, _ = env.reset(options={"task": task})
    assert "External knowledge: older than 40 refers to Age > 40" in obs
    # BIRD's set rule: duplicates do not count (France once vs twice), column order does
    _, reward, *_ = env.step(
        "<solution>SELECT DISTINCT Country FROM singer WHERE Age > 40</solution>"
    )
    assert reward == 1.0
    env.reset(options={"task": task})
    bad = "SELECT Country, Age FROM singer WHERE Age > 40"
    assert env.step(f"<solution>{bad}</solution>")[1] == 0.0
    # env.kwargs override the folder's prompt settings
    env = SQLEnv(schema_format="compact", sample_rows=0)
    obs, _ = env.reset(options={"task": task})
    assert "CREATE TABLE" not in obs and "singer(Singer_ID INT" in obs


def test_hostile_folders_are_refused(spider, tmp_path):
    rows = json.loads((spider / "dev.json").read_text())
    rows[0]["db_id"] = "../../etc"
    (spider / "dev.json").write_text(json.dumps(rows))
    with pytest.raises(ValueError, match="not a plain name"):
        load_tasks(spider)
    # a database that is a symlink out of the folder
    outside = tmp_path / "elsewhere.sqlite"
    _database(tmp_path / "x" / "elsewhere.sqlite")
    outside = tmp_path / "x" / "elsewhere.sqlite"
    (spider / "database" / "evil").mkdir()
    (spider / "database" / "evil" / "evil.sqlite").symlink_to(outside)
    rows[0]["db_id"] = "evil"
    (spider / "dev.json").write_text(json.dumps(rows))
    with pytest.raises(ValueError, match="leads outside"):
        load_tasks(spider)
    (spider / "dev.json").write_text('{"not": "a list"}')
    with pytest.raises(ValueError, match="not a JSON list"):
        load_tasks(spider)
    with pytest.raises(ValueError, match="neither a Spider folder"):
        load_tasks(tmp_path / "x")


def test_skyrl_eval_takes_a_spider_folder(spider, tmp_path):
    from tests.conftest import skyrl

    skyrl(
        "eval", "--env", "sql", "--model", "tiny", "--set", f"env.tasks={spider}",
        "--split", "dev", "--max-turns", "1", "--set", "rollout.max_new_tokens=16",
        "--output", "out", "--no-tracking", cwd=tmp_path,
    )  # fmt: skip # the command line reads as typed
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["n"] == 2  # dev only: the train question is left out
    lines = (tmp_path / "out" / "results.jsonl").read_text().splitlines()
    assert [json.loads(x)["task_id"] for x in lines] == ["spider-dev-0", "spider-dev-1"]
