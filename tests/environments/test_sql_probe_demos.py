"""Warm-up demonstrations that look before answering (`probe_share`, the `sql_transfer`
recipe): a seeded share of tasks probe the gold query's tables first, and the replay puts
the real rows the environment returns between the probe and the answer."""

from __future__ import annotations

import pytest

from agents.agent_loop import demonstration
from agents.chat import ChatFormat
from agents.models import resolve_model
from environments.sql import SQLEnv
from tasks.sql import load_suite


@pytest.fixture(scope="module", autouse=True)
def cache(tmp_path_factory: pytest.TempPathFactory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SKYRL_CACHE_DIR", str(tmp_path_factory.mktemp("skyrl-cache")))
        yield


def _join_task():
    return next(t for t in load_suite("transfer-train") if " JOIN " in t.answer)


def test_a_probing_demonstration_reads_the_tables_of_the_gold_query_then_answers():
    task = _join_task()
    env = SQLEnv(max_turns=3, probe_share=1.0)
    written = env.demonstration(task)
    assert isinstance(written, list) and 2 <= len(written) <= 3, written
    *probes, answer = written
    assert answer == f"<solution>{task.answer}</solution>"
    for probe in probes:
        table = probe.removeprefix("<sql>SELECT * FROM ").removesuffix(" LIMIT 3</sql>")
        assert probe == f"<sql>SELECT * FROM {table} LIMIT 3</sql>" and table in task.answer


def test_the_replay_holds_the_rows_the_database_returns():
    from transformers import AutoTokenizer

    chat = ChatFormat(AutoTokenizer.from_pretrained(resolve_model("tiny", quiet=True)))
    task = _join_task()
    ids, mask, prompt_len = demonstration(
        lambda: SQLEnv(max_turns=3, probe_share=1.0), chat, task, 0
    )
    env = SQLEnv(max_turns=3)
    env.reset(options={"task": task})
    first = env.demonstration(task)  # no probes by default: the plain answer
    assert first == f"<solution>{task.answer}</solution>"
    probe = SQLEnv(max_turns=3, probe_share=1.0).demonstration(task)[0]
    rows, *_ = env.step(probe)
    observed = chat.tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if not m])
    assert rows.splitlines()[1] in observed  # a real row, shown to the model (mask 0)
    trained = chat.tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m])
    assert trained.startswith("<sql>SELECT * FROM") and trained.endswith("</solution>")


def test_the_share_is_seeded_per_task_and_needs_a_turn_for_the_answer():
    tasks = load_suite("transfer-train")
    half = [isinstance(SQLEnv(max_turns=3, probe_share=0.5).demonstration(t), list) for t in tasks]
    assert 0.4 * len(tasks) < sum(half) < 0.6 * len(tasks)
    again = [isinstance(SQLEnv(max_turns=3, probe_share=0.5).demonstration(t), list) for t in tasks]
    assert half == again
    # one turn: no room for a probe; an answer prefix (`<solution>`): no way to write one
    assert isinstance(SQLEnv(max_turns=1, probe_share=1.0).demonstration(tasks[0]), str)
    prefixed = SQLEnv(max_turns=3, probe_share=1.0, response_prefix="<solution>")
    assert prefixed.demonstration(tasks[0]) == f"{tasks[0].answer}</solution>"
    with pytest.raises(ValueError, match="probe_share"):
        SQLEnv(probe_share=1.5)
