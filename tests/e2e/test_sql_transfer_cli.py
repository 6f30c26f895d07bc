"""`skyrl train --config sql_transfer`: the opt-in recipe through the real command, one
step with `tiny` on real SQLite renderings."""

from __future__ import annotations

import json

import yaml

from tests.conftest import NO_TRACKING, skyrl


def test_the_transfer_recipe_trains_on_renderings_and_scores_every_dev_database(
    tmp_path, ray_address
):
    out = skyrl(
        "train",
        *("--config", "sql_transfer", "--model", "tiny", "--max-steps", "1"),
        *("--set", "warmup.sft_steps=1", "--set", "eval.limit=6", "--set", "eval.before=false"),
        *("--set", "rollout.batch_size=2", "--set", "rollout.group_size=2"),
        *("--ray-address", ray_address, *NO_TRACKING),
        cwd=tmp_path,
    )
    (run,) = (tmp_path / "runs").glob("sql-*")
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    assert cfg["env"]["kwargs"]["response_prefix"] == ""  # the preset's "<solution>" is off
    assert cfg["env"]["kwargs"]["probe_share"] == 0.5 and cfg["env"]["max_turns"] == 3
    assert "on 306 reference answers" in out.stdout + out.stderr
    episodes = [json.loads(line) for line in (run / "rollouts" / "step-000001.jsonl").open()]
    assert episodes and all("~" not in e["task_id"] for e in episodes)
    assert all(e["task_id"].rsplit("-", 3)[1] in ("plural", "singular") for e in episodes)
    scored = [json.loads(line)["task_id"] for line in (run / "eval" / "after.jsonl").open()]
    dbs = {t.split("-")[1] for t in scored}  # round robin: six tasks, six databases
    assert dbs == {"bookshop", "university", "airline", "hospital", "weather", "zoo"}, dbs


def test_skyrl_eval_scores_a_split_the_suite_adds(tmp_path):
    """`skyrl eval --split transfer-test` (what `benchmarks/learning.py --test-split` runs on
    a run's checkpoints): the split's first six tasks are one from each of its databases."""
    skyrl(
        "eval",
        *("--env", "sql", "--model", "tiny", "--split", "transfer-test", "--limit", "6"),
        *("--output", str(tmp_path / "out")),
        cwd=tmp_path,
    )
    scored = [json.loads(line)["task_id"] for line in (tmp_path / "out" / "results.jsonl").open()]
    dbs = {t.split("-")[1] for t in scored}
    assert dbs == {"bookshop", "university", "airline", "music", "lending", "league"}, dbs
    bad = skyrl(
        "eval", "--env", "sql", "--model", "tiny", "--split", "valid", cwd=tmp_path, check=False
    )
    assert bad.returncode != 0 and "unknown split 'valid'" in bad.stdout + bad.stderr
