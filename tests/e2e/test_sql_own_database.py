"""`skyrl eval --model runs/<id> --tasks FILE` on a user's own SQLite database, named in
conventions no bundled database uses (issue 35: "works with no other change"), through the
real command: a run trained on the bundled suite, then the user's task file; and the same
file answered by a stand-in model that writes the gold queries, which must all score."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from tests.conftest import skyrl, stand_in_openai

# `TBL_` upper-case prefixed tables, Hungarian-style columns, `<TABLE>_NO` keys: unlike every
# bundled database (and unlike the transfer renderings).
SCHEMA = """
CREATE TABLE TBL_GREENHOUSE(GH_NO INTEGER PRIMARY KEY, strGhName TEXT, intAreaM2 INTEGER);
CREATE TABLE TBL_PLANT(PL_NO INTEGER PRIMARY KEY, strPlName TEXT, GH_NO INTEGER,
                       dtmSown TEXT, fltHeightCm REAL);
INSERT INTO TBL_GREENHOUSE VALUES (1, 'North', 120), (2, 'South', 80);
INSERT INTO TBL_PLANT VALUES (1, 'basil', 1, '2026-03-01', 21.5), (2, 'thyme', 1, '2026-03-04', 9.0),
                             (3, 'tomato', 2, '2026-02-20', 64.0);
"""

GOLD = {
    "g1": ("How many plants grow in the North glasshouse?",
           "SELECT COUNT(*) FROM TBL_PLANT p JOIN TBL_GREENHOUSE g ON p.GH_NO = g.GH_NO "
           "WHERE g.strGhName = 'North'"),
    "g2": ("Which plant is the tallest?",
           "SELECT strPlName FROM TBL_PLANT ORDER BY fltHeightCm DESC LIMIT 1"),
    "g3": ("What is the floor area of each glasshouse?",
           "SELECT strGhName, intAreaM2 FROM TBL_GREENHOUSE"),
}  # fmt: skip # question and gold side by side


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def _own_database(folder: Path) -> Path:
    conn = sqlite3.connect(folder / "garden.sqlite")
    conn.executescript(SCHEMA)
    conn.commit()
    conn.close()
    tasks = folder / "garden.jsonl"
    tasks.write_text(
        "".join(
            json.dumps(
                {
                    "id": i,
                    "env": "sql",
                    "prompt": q,
                    "answer": gold,
                    "metadata": {"database": "garden.sqlite"},
                }
            )
            + "\n"
            for i, (q, gold) in GOLD.items()
        )  # fmt: skip
    )
    return tasks


def test_a_trained_run_scores_a_task_file_of_the_users_own_database(
    tmp_path: Path, ray_address: str
) -> None:
    tasks = _own_database(tmp_path)
    skyrl("train", "--env", "sql", "--model", "tiny", "--max-steps", "1",
          "--set", "warmup.sft_steps=0", "--set", "eval.limit=0",
          "--set", "rollout.batch_size=2", "--set", "rollout.group_size=2",
          "--set", "rollout.max_new_tokens=8", "--set", "tracking.enabled=false",
          "--ray-address", ray_address, cwd=tmp_path)  # fmt: skip # the command line reads as typed
    (run,) = [p for p in (tmp_path / "runs").iterdir() if (p / "config.yaml").exists()]
    proc = skyrl("eval", "--model", f"runs/{run.name}", "--tasks", tasks.name,
                 "--output", "out", "--no-tracking", cwd=tmp_path)  # fmt: skip
    assert "sql" in proc.stdout
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["n"] == 3 and report["errors"] == 0
    assert report["by_database"] == {"garden.sqlite": report["accuracy"]}
    results = _lines(tmp_path / "out" / "results.jsonl")
    prompt = results[0]["turns"][0]["text"]
    # the prompt shows the user's own schema, names as the database spells them
    assert (run / "eval" / "garden-step-000001.json").is_file()  # filed with the run
    assert "TBL_PLANT" in prompt and "fltHeightCm" in prompt and "TBL_GREENHOUSE" in prompt


def test_the_gold_queries_of_the_users_task_file_all_score(tmp_path: Path) -> None:
    tasks = _own_database(tmp_path)

    # the sql preset opens each model turn with `<solution>` (the last, assistant message):
    # the model writes the query and the closing tag
    def gold(body: dict[str, Any]) -> str:
        assert body["messages"][-1] == {"role": "assistant", "content": "<solution>"}
        text = body["messages"][0]["content"]
        (query,) = [g for q, g in GOLD.values() if q in text]
        return f"{query}</solution>"

    with stand_in_openai(gold) as url:
        skyrl("eval", "--env", "sql", "--model", f"openai:gold@{url}", "--tasks", tasks.name,
              "--output", "gold", "--no-tracking", cwd=tmp_path)  # fmt: skip
    report = json.loads((tmp_path / "gold" / "report.json").read_text())
    assert report["n"] == 3 and report["accuracy"] == 1.0

    def habit(body: dict[str, Any]) -> str:  # the bundled suite's naming habit: wrong here
        return "SELECT COUNT(*) FROM plants</solution>"

    with stand_in_openai(habit) as url:
        skyrl("eval", "--env", "sql", "--model", f"openai:habit@{url}", "--tasks", tasks.name,
              "--output", "habit", "--no-tracking", cwd=tmp_path)  # fmt: skip
    assert json.loads((tmp_path / "habit" / "report.json").read_text())["accuracy"] == 0.0
