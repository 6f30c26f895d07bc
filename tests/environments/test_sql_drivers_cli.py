"""The real `skyrl` command on the three SQL drivers (issue 15, acceptance point 1):
training runs with `env.kwargs.dsn` on DuckDB and PostgreSQL, and `skyrl eval` reports the
same accuracy, task by task, on SQLite, DuckDB and PostgreSQL for the same greedy model."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import sqlglot

from tasks.sql import load_suite
from tests.conftest import skyrl, stand_in_openai

DIALECT = {"SQLite": "sqlite", "DuckDB": "duckdb", "PostgreSQL": "postgres"}


def _eval(tmp_path: Path, out: str, *args: str) -> tuple[dict, list[tuple[str, bool]]]:
    skyrl(
        "eval", "--env", "sql", "--split", "dev", "--output", out, "--no-tracking", *args,
        cwd=tmp_path,
    )  # fmt: skip # the command line reads as typed
    report = json.loads((tmp_path / out / "report.json").read_text())
    lines = (tmp_path / out / "results.jsonl").read_text().splitlines()
    per_task = [(r["task_id"], bool(r["correct"])) for r in map(json.loads, lines)]
    return report, per_task


def _dsns(postgres) -> dict[str, list[str]]:
    return {
        "sqlite": [],
        "duckdb": ["--set", "env.kwargs.dsn=duckdb:"],  # YAML reads a mapping: still DuckDB
        "postgresql": ["--set", f"env.kwargs.dsn={postgres.reader_dsn}"],
    }


def test_the_tiny_model_scores_the_same_on_every_driver(tmp_path, postgres):
    got = {
        name: _eval(
            tmp_path,
            name,
            "--model",
            "tiny",
            "--limit",
            "3",
            "--max-turns",
            "2",
            "--set",
            "rollout.max_new_tokens=48",
            *dsn,
        )  # fmt: skip # arguments grouped by meaning, as a reader scans them
        for name, dsn in _dsns(postgres).items()
    }
    reports = {name: r for name, (r, _) in got.items()}
    assert len({r["accuracy"] for r in reports.values()}) == 1, reports
    assert got["sqlite"][1] == got["duckdb"][1] == got["postgresql"][1]


def _answerer(gold: dict[str, tuple[int, str]]) -> Callable[[dict], str]:
    """Answers that know the gold: for every other dev question the gold query in the
    dialect the prompt asks for, else a query with no rows."""

    def answer(body: dict) -> str:
        prompt = "\n".join(str(m["content"]) for m in body["messages"])
        question = re.search(r"Question: (.*)\n", prompt).group(1)  # type: ignore[union-attr]
        dialect = DIALECT[re.search(r"Reply with one (\w+) query", prompt).group(1)]  # type: ignore[union-attr]
        index, sql = gold[question]
        sql = sqlglot.transpile(sql, read="sqlite", write=dialect)[0]
        if index % 2:
            sql = f"SELECT * FROM ({sql}) AS s WHERE 1 = 0"
        # the SQL preset starts each model turn with its response_prefix, sent as a prefill
        last = body["messages"][-1]
        prefilled = last["role"] == "assistant" and last["content"] == "<solution>"
        return f"{'' if prefilled else '<solution>'}{sql}</solution>"

    return answer


def test_a_model_that_answers_half_scores_half_on_every_driver(tmp_path, postgres):
    dev = load_suite("dev")[:16]
    gold = {str(t.prompt): (i, str(t.answer)) for i, t in enumerate(dev)}
    with stand_in_openai(_answerer(gold), tokens=10) as url:
        got = {
            name: _eval(tmp_path, name, "--model", f"openai:oracle@{url}", "--limit", "16", *dsn)
            for name, dsn in _dsns(postgres).items()
        }
    for name, (report, _) in got.items():
        assert report["accuracy"] == 0.5, (name, report)
    assert got["sqlite"][1] == got["duckdb"][1] == got["postgresql"][1]


def test_train_runs_on_duckdb_and_postgresql(tmp_path, postgres, ray_address):
    """`skyrl train --env sql --set env.kwargs.dsn=... --model tiny --max-steps 2`, with the
    warm-up and evaluation cut so that two drivers fit CI's time."""
    for name, dsn in list(_dsns(postgres).items())[1:]:
        skyrl(
            "train", "--env", "sql", "--model", "tiny", "--max-steps", "2", *dsn,
            "--run-name", name, "--set", "warmup.sft_steps=0", "--set", "eval.limit=0",
            "--set", "rollout.batch_size=2", "--set", "rollout.group_size=2",
            "--set", "rollout.max_new_tokens=32", "--set", "env.max_turns=2",
            "--set", "tracking.enabled=false",
            "--ray-address", ray_address, cwd=tmp_path,
        )  # fmt: skip # the command line reads as typed
        (run,) = (tmp_path / "runs").glob(f"{name}-*")
        steps = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        assert [s["step"] for s in steps] == [1, 2]
        assert all(s["episodes/failed"] == 0 for s in steps), steps
        config = (run / "config.yaml").read_text()
        assert ("duckdb:" if name == "duckdb" else "skyrl_reader@") in config
        rollout = (run / "rollouts" / "step-000001.jsonl").read_text()
        label = "DuckDB" if name == "duckdb" else "PostgreSQL"
        assert f"Reply with one {label} query" in rollout
